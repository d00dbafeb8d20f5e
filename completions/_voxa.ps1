
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'voxa' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'voxa'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'voxa' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('pair', 'pair', [CompletionResultType]::ParameterValue, 'Create the secrets if missing and print the QR code and pairing URL')
            [CompletionResult]::new('run', 'run', [CompletionResultType]::ParameterValue, 'Stay connected: loopback server plus relay dialer, until Ctrl-C (the default command)')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Show whether this machine is paired and what the running agent is doing')
            [CompletionResult]::new('call', 'call', [CompletionResultType]::ParameterValue, 'Run one tool through the running agent and print its result')
            [CompletionResult]::new('approvals', 'approvals', [CompletionResultType]::ParameterValue, 'List the approvals waiting for a decision in the running agent; its grants; revoke one')
            [CompletionResult]::new('approve', 'approve', [CompletionResultType]::ParameterValue, 'Answer an approval: allow or deny it')
            [CompletionResult]::new('agent', 'agent', [CompletionResultType]::ParameterValue, 'Coding-agent sessions of the running agent: start, send, log, list, interrupt, stop')
            [CompletionResult]::new('relay', 'relay', [CompletionResultType]::ParameterValue, 'Run a relay server')
            [CompletionResult]::new('env', 'env', [CompletionResultType]::ParameterValue, 'Drive other machines from this one (multi-environment pairing)')
            [CompletionResult]::new('open', 'open', [CompletionResultType]::ParameterValue, 'Open the web client of the running agent in the default browser')
            [CompletionResult]::new('service', 'service', [CompletionResultType]::ParameterValue, 'Keep `voxa run` running at login (systemd user unit on Linux, launchd agent on macOS)')
            [CompletionResult]::new('doctor', 'doctor', [CompletionResultType]::ParameterValue, 'Check this setup, one line per check, and say how to fix what is wrong')
            [CompletionResult]::new('notify', 'notify', [CompletionResultType]::ParameterValue, 'Phone notifications (Web Push): send a test to every subscribed browser')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print a shell completion script')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'voxa;pair' {
            [CompletionResult]::new('--relay-token', '--relay-token', [CompletionResultType]::ParameterName, 'Token the relay requires, put in the link''s fragment for the page to present (else the one saved in the home); prefer VOXA_RELAY_TOKEN or --relay-token-file')
            [CompletionResult]::new('--relay-token-file', '--relay-token-file', [CompletionResultType]::ParameterName, 'Read the relay token for the link from this file (first line; not readable by others)')
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--rotate', '--rotate', [CompletionResultType]::ParameterName, 'Replace both secrets (the phone must scan the new code)')
            [CompletionResult]::new('--no-qr', '--no-qr', [CompletionResultType]::ParameterName, 'Print the URL without the QR code')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;run' {
            [CompletionResult]::new('--port', '--port', [CompletionResultType]::ParameterName, 'Loopback port for local clients (0 picks a free one)')
            [CompletionResult]::new('--workspace', '--workspace', [CompletionResultType]::ParameterName, 'Root that file tools and commands are confined to [default: the current directory]')
            [CompletionResult]::new('--embedded-relay', '--embedded-relay', [CompletionResultType]::ParameterName, 'Run a relay inside this process on a loopback address and dial it (for trying voxa offline)')
            [CompletionResult]::new('--lan', '--lan', [CompletionResultType]::ParameterName, 'Run a relay inside this process for phones on this network: on this machine''s address there (or ADDR, as 192.168.1.20 or 192.168.1.20:8443), over HTTPS with a certificate of its own, whose fingerprint it prints (for a network you trust; docs/GUIDE.md)')
            [CompletionResult]::new('--ca-cert', '--ca-cert', [CompletionResultType]::ParameterName, 'Extra CA certificate (PEM) to trust for the relay''s TLS, e.g. a self-signed relay')
            [CompletionResult]::new('--relay-token', '--relay-token', [CompletionResultType]::ParameterName, 'Token the relay requires (sent as Authorization: Bearer); prefer VOXA_RELAY_TOKEN or --relay-token-file, a flag''s value is visible to every user in `ps`')
            [CompletionResult]::new('--relay-token-file', '--relay-token-file', [CompletionResultType]::ParameterName, 'Read the relay token from this file (first line; the file must not be readable by others)')
            [CompletionResult]::new('--model', '--model', [CompletionResultType]::ParameterName, 'Gemini Live model for self-hosted mode (default gemini-3.8-live, or [gemini] model in config.toml)')
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;status' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;call' {
            [CompletionResult]::new('--env', '--env', [CompletionResultType]::ParameterName, 'Route the call to a paired environment (its envKey or name)')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Where `screenshot` saves the image [default: screenshot-<UTC time>.png in the current directory]')
            [CompletionResult]::new('--out', '--out', [CompletionResultType]::ParameterName, 'Where `screenshot` saves the image [default: screenshot-<UTC time>.png in the current directory]')
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;approvals' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('grants', 'grants', [CompletionResultType]::ParameterValue, 'List the grants "Allow for session" made: what each lets through without asking')
            [CompletionResult]::new('revoke', 'revoke', [CompletionResultType]::ParameterValue, 'End a grant: what it let through asks again')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'voxa;approvals;grants' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;approvals;revoke' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;approvals;help' {
            [CompletionResult]::new('grants', 'grants', [CompletionResultType]::ParameterValue, 'List the grants "Allow for session" made: what each lets through without asking')
            [CompletionResult]::new('revoke', 'revoke', [CompletionResultType]::ParameterValue, 'End a grant: what it let through asks again')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'voxa;approvals;help;grants' {
            break
        }
        'voxa;approvals;help;revoke' {
            break
        }
        'voxa;approvals;help;help' {
            break
        }
        'voxa;approve' {
            [CompletionResult]::new('-m', '-m', [CompletionResultType]::ParameterName, 'Why: the asker reads it (a coding agent, or the caller of a denied tool)')
            [CompletionResult]::new('--message', '--message', [CompletionResultType]::ParameterName, 'Why: the asker reads it (a coding agent, or the caller of a denied tool)')
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;agent' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('start', 'start', [CompletionResultType]::ParameterValue, 'Start a session with PROMPT and follow its first turn until it ends')
            [CompletionResult]::new('send', 'send', [CompletionResultType]::ParameterValue, 'Send SESSION a turn and follow it until it ends (an ended session is resumed first)')
            [CompletionResult]::new('log', 'log', [CompletionResultType]::ParameterValue, 'Print SESSION''s events, oldest first')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'List the sessions, most recent first')
            [CompletionResult]::new('interrupt', 'interrupt', [CompletionResultType]::ParameterValue, 'End SESSION''s running turn (the session stays)')
            [CompletionResult]::new('stop', 'stop', [CompletionResultType]::ParameterValue, 'End SESSION''s agent process (the session stays listed and resumable)')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'voxa;agent;start' {
            [CompletionResult]::new('--agent', '--agent', [CompletionResultType]::ParameterName, 'Which coding agent (claude, or one configured in config.toml [agents])')
            [CompletionResult]::new('--cwd', '--cwd', [CompletionResultType]::ParameterName, 'Where it works, relative to the workspace [default: the workspace]')
            [CompletionResult]::new('--title', '--title', [CompletionResultType]::ParameterName, 'The session''s title [default: the prompt''s first line]')
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--detach', '--detach', [CompletionResultType]::ParameterName, 'Print the session''s id and return at once')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;agent;send' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--detach', '--detach', [CompletionResultType]::ParameterName, 'Return once it is sent')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;agent;log' {
            [CompletionResult]::new('--after', '--after', [CompletionResultType]::ParameterName, 'Only the events after this seq')
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('-f', '-f', [CompletionResultType]::ParameterName, 'Then wait for more, until interrupted')
            [CompletionResult]::new('--follow', '--follow', [CompletionResultType]::ParameterName, 'Then wait for more, until interrupted')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;agent;list' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;agent;interrupt' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;agent;stop' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;agent;help' {
            [CompletionResult]::new('start', 'start', [CompletionResultType]::ParameterValue, 'Start a session with PROMPT and follow its first turn until it ends')
            [CompletionResult]::new('send', 'send', [CompletionResultType]::ParameterValue, 'Send SESSION a turn and follow it until it ends (an ended session is resumed first)')
            [CompletionResult]::new('log', 'log', [CompletionResultType]::ParameterValue, 'Print SESSION''s events, oldest first')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'List the sessions, most recent first')
            [CompletionResult]::new('interrupt', 'interrupt', [CompletionResultType]::ParameterValue, 'End SESSION''s running turn (the session stays)')
            [CompletionResult]::new('stop', 'stop', [CompletionResultType]::ParameterValue, 'End SESSION''s agent process (the session stays listed and resumable)')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'voxa;agent;help;start' {
            break
        }
        'voxa;agent;help;send' {
            break
        }
        'voxa;agent;help;log' {
            break
        }
        'voxa;agent;help;list' {
            break
        }
        'voxa;agent;help;interrupt' {
            break
        }
        'voxa;agent;help;stop' {
            break
        }
        'voxa;agent;help;help' {
            break
        }
        'voxa;relay' {
            [CompletionResult]::new('--listen', '--listen', [CompletionResultType]::ParameterName, 'Address to listen on')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'TLS certificate chain (PEM); serve wss:// with --tls-key')
            [CompletionResult]::new('--domain', '--domain', [CompletionResultType]::ParameterName, 'Serve wss:// for this DNS name with a certificate the relay obtains and renews itself by ACME (TLS-ALPN-01: the name must resolve here and reach --listen on port 443); kept in the home')
            [CompletionResult]::new('--acme-directory', '--acme-directory', [CompletionResultType]::ParameterName, 'ACME directory of the CA that issues the --domain certificate (a staging or company CA)')
            [CompletionResult]::new('--acme-ca-file', '--acme-ca-file', [CompletionResultType]::ParameterName, 'Trust this PEM root for the ACME server''s own HTTPS (one not in the system roots)')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'TLS private key (PEM)')
            [CompletionResult]::new('--relay-token', '--relay-token', [CompletionResultType]::ParameterName, 'Require this token from both sides (Authorization: Bearer); prefer VOXA_RELAY_TOKEN or --relay-token-file, a flag''s value is visible to every user in `ps`')
            [CompletionResult]::new('--metrics-listen', '--metrics-listen', [CompletionResultType]::ParameterName, 'Serve Prometheus metrics at http://ADDR/metrics (keep it private: no authentication)')
            [CompletionResult]::new('--max-connections-per-ip', '--max-connections-per-ip', [CompletionResultType]::ParameterName, 'Connections one client address (IPv4, or IPv6 /64) may hold; 0 for no limit (behind a proxy)')
            [CompletionResult]::new('--memory-budget', '--memory-budget', [CompletionResultType]::ParameterName, 'Memory for messages in flight, in MiB (default 256); over it the oldest heavy socket is closed')
            [CompletionResult]::new('--relay-token-file', '--relay-token-file', [CompletionResultType]::ParameterName, 'Read the relay token from this file (first line; the file must not be readable by others)')
            [CompletionResult]::new('--gemini-key-file', '--gemini-key-file', [CompletionResultType]::ParameterName, 'Host voice calls at /live with the Gemini API key in this file (else GEMINI_API_KEY)')
            [CompletionResult]::new('--live-max-calls', '--live-max-calls', [CompletionResultType]::ParameterName, 'Hosted voice calls at once; more get call_error at-capacity')
            [CompletionResult]::new('--live-max-minutes', '--live-max-minutes', [CompletionResultType]::ParameterName, 'Longest hosted voice call, in minutes')
            [CompletionResult]::new('--live-calls-per-address', '--live-calls-per-address', [CompletionResultType]::ParameterName, 'Hosted voice calls one client address runs at once; more get call_error too-many-calls')
            [CompletionResult]::new('--live-starts-per-minute', '--live-starts-per-minute', [CompletionResultType]::ParameterName, 'Hosted voice calls one client address starts per minute; more get call_error too-many-calls')
            [CompletionResult]::new('--live-client-header', '--live-client-header', [CompletionResultType]::ParameterName, 'Take a /live client''s address from this request header (e.g. X-Forwarded-For), set by a trusted proxy in front of the relay; only when clients cannot reach the relay but through it')
            [CompletionResult]::new('--live-minutes-per-day', '--live-minutes-per-day', [CompletionResultType]::ParameterName, 'Minutes of hosted calls per UTC day on your Gemini key (0 for no limit); counted in the home')
            [CompletionResult]::new('--live-model', '--live-model', [CompletionResultType]::ParameterName, 'Gemini Live model for hosted calls')
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--open-live', '--open-live', [CompletionResultType]::ParameterName, 'Host /live for anyone who asks, without VOXA_PROXY_TOKEN or a relay token: every call spends your Gemini key (without it, a relay with a key and no token refuses to start)')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;env' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('issue', 'issue', [CompletionResultType]::ParameterValue, 'On an environment: issue a pairing and print the line to paste on the host')
            [CompletionResult]::new('add', 'add', [CompletionResultType]::ParameterValue, 'On the host: record an environment from the line `voxa env issue` printed')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'List known environments and whether they answer')
            [CompletionResult]::new('revoke', 'revoke', [CompletionResultType]::ParameterValue, 'On an environment: revoke a pairing (by id, bearer or envKey) and close its sessions')
            [CompletionResult]::new('remove', 'remove', [CompletionResultType]::ParameterValue, 'On the host: forget an environment')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'voxa;env;issue' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;env;add' {
            [CompletionResult]::new('--name', '--name', [CompletionResultType]::ParameterName, 'A short name for the environment')
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;env;list' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;env;revoke' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;env;remove' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;env;help' {
            [CompletionResult]::new('issue', 'issue', [CompletionResultType]::ParameterValue, 'On an environment: issue a pairing and print the line to paste on the host')
            [CompletionResult]::new('add', 'add', [CompletionResultType]::ParameterValue, 'On the host: record an environment from the line `voxa env issue` printed')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'List known environments and whether they answer')
            [CompletionResult]::new('revoke', 'revoke', [CompletionResultType]::ParameterValue, 'On an environment: revoke a pairing (by id, bearer or envKey) and close its sessions')
            [CompletionResult]::new('remove', 'remove', [CompletionResultType]::ParameterValue, 'On the host: forget an environment')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'voxa;env;help;issue' {
            break
        }
        'voxa;env;help;add' {
            break
        }
        'voxa;env;help;list' {
            break
        }
        'voxa;env;help;revoke' {
            break
        }
        'voxa;env;help;remove' {
            break
        }
        'voxa;env;help;help' {
            break
        }
        'voxa;open' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--no-browser', '--no-browser', [CompletionResultType]::ParameterName, 'Print the link (with the token in its fragment) instead of opening a browser')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;service' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('install', 'install', [CompletionResultType]::ParameterValue, 'Write the service file and start it now and at every login (twice is harmless)')
            [CompletionResult]::new('uninstall', 'uninstall', [CompletionResultType]::ParameterValue, 'Stop the service and remove its file')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Whether the service is installed, enabled and running')
            [CompletionResult]::new('logs', 'logs', [CompletionResultType]::ParameterValue, 'Show the service''s recent log lines')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'voxa;service;install' {
            [CompletionResult]::new('--workspace', '--workspace', [CompletionResultType]::ParameterName, 'Root the service''s tools are confined to [default: the current directory]')
            [CompletionResult]::new('--ca-cert', '--ca-cert', [CompletionResultType]::ParameterName, 'Extra CA certificate (PEM) the service trusts for the relay''s TLS')
            [CompletionResult]::new('--relay-token', '--relay-token', [CompletionResultType]::ParameterName, 'Token the relay requires; saved in the home (0600) for the service, never in its file')
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Print the service file and where it would go; change nothing')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;service;uninstall' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Say what would be stopped and removed; change nothing')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;service;status' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;service;logs' {
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'How many recent lines to show')
            [CompletionResult]::new('--lines', '--lines', [CompletionResultType]::ParameterName, 'How many recent lines to show')
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('-f', '-f', [CompletionResultType]::ParameterName, 'Keep printing new lines as they come')
            [CompletionResult]::new('--follow', '--follow', [CompletionResultType]::ParameterName, 'Keep printing new lines as they come')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;service;help' {
            [CompletionResult]::new('install', 'install', [CompletionResultType]::ParameterValue, 'Write the service file and start it now and at every login (twice is harmless)')
            [CompletionResult]::new('uninstall', 'uninstall', [CompletionResultType]::ParameterValue, 'Stop the service and remove its file')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Whether the service is installed, enabled and running')
            [CompletionResult]::new('logs', 'logs', [CompletionResultType]::ParameterValue, 'Show the service''s recent log lines')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'voxa;service;help;install' {
            break
        }
        'voxa;service;help;uninstall' {
            break
        }
        'voxa;service;help;status' {
            break
        }
        'voxa;service;help;logs' {
            break
        }
        'voxa;service;help;help' {
            break
        }
        'voxa;doctor' {
            [CompletionResult]::new('--ca-cert', '--ca-cert', [CompletionResultType]::ParameterName, 'Extra CA certificate (PEM) to trust for the relay''s TLS, as `voxa run --ca-cert`')
            [CompletionResult]::new('--relay-token', '--relay-token', [CompletionResultType]::ParameterName, 'Token the relay requires (checked against the relay, never printed) [default: saved in the home]')
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;notify' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('test', 'test', [CompletionResultType]::ParameterValue, 'Send one notification to every subscribed browser and show what each push service answered')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'voxa;notify;test' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;notify;help' {
            [CompletionResult]::new('test', 'test', [CompletionResultType]::ParameterValue, 'Send one notification to every subscribed browser and show what each push service answered')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'voxa;notify;help;test' {
            break
        }
        'voxa;notify;help;help' {
            break
        }
        'voxa;completions' {
            [CompletionResult]::new('--home', '--home', [CompletionResultType]::ParameterName, 'State directory holding the secrets and settings [default: ~/.voxa]')
            [CompletionResult]::new('--relay', '--relay', [CompletionResultType]::ParameterName, 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]')
            [CompletionResult]::new('--self-hosted', '--self-hosted', [CompletionResultType]::ParameterName, 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (one object per line for event streams) instead of text')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output on stderr (-v info, -vv debug, -vvv trace)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'voxa;help' {
            [CompletionResult]::new('pair', 'pair', [CompletionResultType]::ParameterValue, 'Create the secrets if missing and print the QR code and pairing URL')
            [CompletionResult]::new('run', 'run', [CompletionResultType]::ParameterValue, 'Stay connected: loopback server plus relay dialer, until Ctrl-C (the default command)')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Show whether this machine is paired and what the running agent is doing')
            [CompletionResult]::new('call', 'call', [CompletionResultType]::ParameterValue, 'Run one tool through the running agent and print its result')
            [CompletionResult]::new('approvals', 'approvals', [CompletionResultType]::ParameterValue, 'List the approvals waiting for a decision in the running agent; its grants; revoke one')
            [CompletionResult]::new('approve', 'approve', [CompletionResultType]::ParameterValue, 'Answer an approval: allow or deny it')
            [CompletionResult]::new('agent', 'agent', [CompletionResultType]::ParameterValue, 'Coding-agent sessions of the running agent: start, send, log, list, interrupt, stop')
            [CompletionResult]::new('relay', 'relay', [CompletionResultType]::ParameterValue, 'Run a relay server')
            [CompletionResult]::new('env', 'env', [CompletionResultType]::ParameterValue, 'Drive other machines from this one (multi-environment pairing)')
            [CompletionResult]::new('open', 'open', [CompletionResultType]::ParameterValue, 'Open the web client of the running agent in the default browser')
            [CompletionResult]::new('service', 'service', [CompletionResultType]::ParameterValue, 'Keep `voxa run` running at login (systemd user unit on Linux, launchd agent on macOS)')
            [CompletionResult]::new('doctor', 'doctor', [CompletionResultType]::ParameterValue, 'Check this setup, one line per check, and say how to fix what is wrong')
            [CompletionResult]::new('notify', 'notify', [CompletionResultType]::ParameterValue, 'Phone notifications (Web Push): send a test to every subscribed browser')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print a shell completion script')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'voxa;help;pair' {
            break
        }
        'voxa;help;run' {
            break
        }
        'voxa;help;status' {
            break
        }
        'voxa;help;call' {
            break
        }
        'voxa;help;approvals' {
            [CompletionResult]::new('grants', 'grants', [CompletionResultType]::ParameterValue, 'List the grants "Allow for session" made: what each lets through without asking')
            [CompletionResult]::new('revoke', 'revoke', [CompletionResultType]::ParameterValue, 'End a grant: what it let through asks again')
            break
        }
        'voxa;help;approvals;grants' {
            break
        }
        'voxa;help;approvals;revoke' {
            break
        }
        'voxa;help;approve' {
            break
        }
        'voxa;help;agent' {
            [CompletionResult]::new('start', 'start', [CompletionResultType]::ParameterValue, 'Start a session with PROMPT and follow its first turn until it ends')
            [CompletionResult]::new('send', 'send', [CompletionResultType]::ParameterValue, 'Send SESSION a turn and follow it until it ends (an ended session is resumed first)')
            [CompletionResult]::new('log', 'log', [CompletionResultType]::ParameterValue, 'Print SESSION''s events, oldest first')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'List the sessions, most recent first')
            [CompletionResult]::new('interrupt', 'interrupt', [CompletionResultType]::ParameterValue, 'End SESSION''s running turn (the session stays)')
            [CompletionResult]::new('stop', 'stop', [CompletionResultType]::ParameterValue, 'End SESSION''s agent process (the session stays listed and resumable)')
            break
        }
        'voxa;help;agent;start' {
            break
        }
        'voxa;help;agent;send' {
            break
        }
        'voxa;help;agent;log' {
            break
        }
        'voxa;help;agent;list' {
            break
        }
        'voxa;help;agent;interrupt' {
            break
        }
        'voxa;help;agent;stop' {
            break
        }
        'voxa;help;relay' {
            break
        }
        'voxa;help;env' {
            [CompletionResult]::new('issue', 'issue', [CompletionResultType]::ParameterValue, 'On an environment: issue a pairing and print the line to paste on the host')
            [CompletionResult]::new('add', 'add', [CompletionResultType]::ParameterValue, 'On the host: record an environment from the line `voxa env issue` printed')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'List known environments and whether they answer')
            [CompletionResult]::new('revoke', 'revoke', [CompletionResultType]::ParameterValue, 'On an environment: revoke a pairing (by id, bearer or envKey) and close its sessions')
            [CompletionResult]::new('remove', 'remove', [CompletionResultType]::ParameterValue, 'On the host: forget an environment')
            break
        }
        'voxa;help;env;issue' {
            break
        }
        'voxa;help;env;add' {
            break
        }
        'voxa;help;env;list' {
            break
        }
        'voxa;help;env;revoke' {
            break
        }
        'voxa;help;env;remove' {
            break
        }
        'voxa;help;open' {
            break
        }
        'voxa;help;service' {
            [CompletionResult]::new('install', 'install', [CompletionResultType]::ParameterValue, 'Write the service file and start it now and at every login (twice is harmless)')
            [CompletionResult]::new('uninstall', 'uninstall', [CompletionResultType]::ParameterValue, 'Stop the service and remove its file')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Whether the service is installed, enabled and running')
            [CompletionResult]::new('logs', 'logs', [CompletionResultType]::ParameterValue, 'Show the service''s recent log lines')
            break
        }
        'voxa;help;service;install' {
            break
        }
        'voxa;help;service;uninstall' {
            break
        }
        'voxa;help;service;status' {
            break
        }
        'voxa;help;service;logs' {
            break
        }
        'voxa;help;doctor' {
            break
        }
        'voxa;help;notify' {
            [CompletionResult]::new('test', 'test', [CompletionResultType]::ParameterValue, 'Send one notification to every subscribed browser and show what each push service answered')
            break
        }
        'voxa;help;notify;test' {
            break
        }
        'voxa;help;completions' {
            break
        }
        'voxa;help;help' {
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
