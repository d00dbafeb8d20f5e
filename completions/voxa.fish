# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_voxa_global_optspecs
    string join \n home= relay= self-hosted json v/verbose q/quiet h/help V/version
end

function __fish_voxa_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_voxa_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_voxa_using_subcommand
    set -l cmd (__fish_voxa_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c voxa -n "__fish_voxa_needs_command" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_needs_command" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_needs_command" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_needs_command" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_needs_command" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_needs_command" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_needs_command" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_needs_command" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_needs_command" -f -a "pair" -d 'Create the secrets if missing and print the QR code and pairing URL'
complete -c voxa -n "__fish_voxa_needs_command" -f -a "run" -d 'Stay connected: loopback server plus relay dialer, until Ctrl-C (the default command)'
complete -c voxa -n "__fish_voxa_needs_command" -f -a "status" -d 'Show whether this machine is paired and what the running agent is doing'
complete -c voxa -n "__fish_voxa_needs_command" -f -a "call" -d 'Run one tool through the running agent and print its result'
complete -c voxa -n "__fish_voxa_needs_command" -f -a "approvals" -d 'List the approvals waiting for a decision in the running agent; its grants; revoke one'
complete -c voxa -n "__fish_voxa_needs_command" -f -a "approve" -d 'Answer an approval: allow or deny it'
complete -c voxa -n "__fish_voxa_needs_command" -f -a "agent" -d 'Coding-agent sessions of the running agent: start, send, log, list, interrupt, stop'
complete -c voxa -n "__fish_voxa_needs_command" -f -a "relay" -d 'Run a relay server'
complete -c voxa -n "__fish_voxa_needs_command" -f -a "env" -d 'Drive other machines from this one (multi-environment pairing)'
complete -c voxa -n "__fish_voxa_needs_command" -f -a "open" -d 'Open the web client of the running agent in the default browser'
complete -c voxa -n "__fish_voxa_needs_command" -f -a "service" -d 'Keep `voxa run` running at login (systemd user unit on Linux, launchd agent on macOS)'
complete -c voxa -n "__fish_voxa_needs_command" -f -a "doctor" -d 'Check this setup, one line per check, and say how to fix what is wrong'
complete -c voxa -n "__fish_voxa_needs_command" -f -a "notify" -d 'Phone notifications (Web Push): send a test to every subscribed browser'
complete -c voxa -n "__fish_voxa_needs_command" -f -a "completions" -d 'Print a shell completion script'
complete -c voxa -n "__fish_voxa_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c voxa -n "__fish_voxa_using_subcommand pair" -l relay-token -d 'Token the relay requires, put in the link\'s fragment for the page to present (else the one saved in the home); prefer VOXA_RELAY_TOKEN or --relay-token-file' -r
complete -c voxa -n "__fish_voxa_using_subcommand pair" -l relay-token-file -d 'Read the relay token for the link from this file (first line; not readable by others)' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand pair" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand pair" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand pair" -l rotate -d 'Replace both secrets (the phone must scan the new code)'
complete -c voxa -n "__fish_voxa_using_subcommand pair" -l no-qr -d 'Print the URL without the QR code'
complete -c voxa -n "__fish_voxa_using_subcommand pair" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand pair" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand pair" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand pair" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand pair" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand pair" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand run" -l port -d 'Loopback port for local clients (0 picks a free one)' -r
complete -c voxa -n "__fish_voxa_using_subcommand run" -l workspace -d 'Root that file tools and commands are confined to [default: the current directory]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand run" -l embedded-relay -d 'Run a relay inside this process on a loopback address and dial it (for trying voxa offline)' -r
complete -c voxa -n "__fish_voxa_using_subcommand run" -l lan -d 'Run a relay inside this process for phones on this network: on this machine\'s address there (or ADDR, as 192.168.1.20 or 192.168.1.20:8443), over HTTPS with a certificate of its own, whose fingerprint it prints (for a network you trust; docs/GUIDE.md)' -r
complete -c voxa -n "__fish_voxa_using_subcommand run" -l ca-cert -d 'Extra CA certificate (PEM) to trust for the relay\'s TLS, e.g. a self-signed relay' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand run" -l relay-token -d 'Token the relay requires (sent as Authorization: Bearer); prefer VOXA_RELAY_TOKEN or --relay-token-file, a flag\'s value is visible to every user in `ps`' -r
complete -c voxa -n "__fish_voxa_using_subcommand run" -l relay-token-file -d 'Read the relay token from this file (first line; the file must not be readable by others)' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand run" -l model -d 'Gemini Live model for self-hosted mode (default gemini-3.8-live, or [gemini] model in config.toml)' -r
complete -c voxa -n "__fish_voxa_using_subcommand run" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand run" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand run" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand run" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand run" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand run" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand run" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand run" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand status" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand status" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand status" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand status" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand status" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand status" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand status" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand status" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand call" -l env -d 'Route the call to a paired environment (its envKey or name)' -r
complete -c voxa -n "__fish_voxa_using_subcommand call" -s o -l out -d 'Where `screenshot` saves the image [default: screenshot-<UTC time>.png in the current directory]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand call" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand call" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand call" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand call" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand call" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand call" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand call" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand call" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and not __fish_seen_subcommand_from grants revoke help" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and not __fish_seen_subcommand_from grants revoke help" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and not __fish_seen_subcommand_from grants revoke help" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and not __fish_seen_subcommand_from grants revoke help" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and not __fish_seen_subcommand_from grants revoke help" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and not __fish_seen_subcommand_from grants revoke help" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and not __fish_seen_subcommand_from grants revoke help" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and not __fish_seen_subcommand_from grants revoke help" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and not __fish_seen_subcommand_from grants revoke help" -f -a "grants" -d 'List the grants "Allow for session" made: what each lets through without asking'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and not __fish_seen_subcommand_from grants revoke help" -f -a "revoke" -d 'End a grant: what it let through asks again'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and not __fish_seen_subcommand_from grants revoke help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from grants" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from grants" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from grants" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from grants" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from grants" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from grants" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from grants" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from grants" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from revoke" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from revoke" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from revoke" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from revoke" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from revoke" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from revoke" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from revoke" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from revoke" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from help" -f -a "grants" -d 'List the grants "Allow for session" made: what each lets through without asking'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from help" -f -a "revoke" -d 'End a grant: what it let through asks again'
complete -c voxa -n "__fish_voxa_using_subcommand approvals; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c voxa -n "__fish_voxa_using_subcommand approve" -s m -l message -d 'Why: the asker reads it (a coding agent, or the caller of a denied tool)' -r
complete -c voxa -n "__fish_voxa_using_subcommand approve" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand approve" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand approve" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand approve" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand approve" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand approve" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand approve" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c voxa -n "__fish_voxa_using_subcommand approve" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and not __fish_seen_subcommand_from start send log list interrupt stop help" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand agent; and not __fish_seen_subcommand_from start send log list interrupt stop help" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand agent; and not __fish_seen_subcommand_from start send log list interrupt stop help" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and not __fish_seen_subcommand_from start send log list interrupt stop help" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and not __fish_seen_subcommand_from start send log list interrupt stop help" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and not __fish_seen_subcommand_from start send log list interrupt stop help" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and not __fish_seen_subcommand_from start send log list interrupt stop help" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and not __fish_seen_subcommand_from start send log list interrupt stop help" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and not __fish_seen_subcommand_from start send log list interrupt stop help" -f -a "start" -d 'Start a session with PROMPT and follow its first turn until it ends'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and not __fish_seen_subcommand_from start send log list interrupt stop help" -f -a "send" -d 'Send SESSION a turn and follow it until it ends (an ended session is resumed first)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and not __fish_seen_subcommand_from start send log list interrupt stop help" -f -a "log" -d 'Print SESSION\'s events, oldest first'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and not __fish_seen_subcommand_from start send log list interrupt stop help" -f -a "list" -d 'List the sessions, most recent first'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and not __fish_seen_subcommand_from start send log list interrupt stop help" -f -a "interrupt" -d 'End SESSION\'s running turn (the session stays)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and not __fish_seen_subcommand_from start send log list interrupt stop help" -f -a "stop" -d 'End SESSION\'s agent process (the session stays listed and resumable)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and not __fish_seen_subcommand_from start send log list interrupt stop help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from start" -l agent -d 'Which coding agent (claude, or one configured in config.toml [agents])' -r
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from start" -l cwd -d 'Where it works, relative to the workspace [default: the workspace]' -r
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from start" -l title -d 'The session\'s title [default: the prompt\'s first line]' -r
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from start" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from start" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from start" -l detach -d 'Print the session\'s id and return at once'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from start" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from start" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from start" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from start" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from start" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from start" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from send" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from send" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from send" -l detach -d 'Return once it is sent'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from send" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from send" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from send" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from send" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from send" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from send" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from log" -l after -d 'Only the events after this seq' -r
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from log" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from log" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from log" -s f -l follow -d 'Then wait for more, until interrupted'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from log" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from log" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from log" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from log" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from log" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from log" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from list" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from list" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from list" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from list" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from list" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from list" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from interrupt" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from interrupt" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from interrupt" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from interrupt" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from interrupt" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from interrupt" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from interrupt" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from interrupt" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from stop" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from stop" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from stop" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from stop" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from stop" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from stop" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from stop" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from stop" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from help" -f -a "start" -d 'Start a session with PROMPT and follow its first turn until it ends'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from help" -f -a "send" -d 'Send SESSION a turn and follow it until it ends (an ended session is resumed first)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from help" -f -a "log" -d 'Print SESSION\'s events, oldest first'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from help" -f -a "list" -d 'List the sessions, most recent first'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from help" -f -a "interrupt" -d 'End SESSION\'s running turn (the session stays)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from help" -f -a "stop" -d 'End SESSION\'s agent process (the session stays listed and resumable)'
complete -c voxa -n "__fish_voxa_using_subcommand agent; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l listen -d 'Address to listen on' -r
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l tls-cert -d 'TLS certificate chain (PEM); serve wss:// with --tls-key' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l domain -d 'Serve wss:// for this DNS name with a certificate the relay obtains and renews itself by ACME (TLS-ALPN-01: the name must resolve here and reach --listen on port 443); kept in the home' -r
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l acme-directory -d 'ACME directory of the CA that issues the --domain certificate (a staging or company CA)' -r
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l acme-ca-file -d 'Trust this PEM root for the ACME server\'s own HTTPS (one not in the system roots)' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l tls-key -d 'TLS private key (PEM)' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l relay-token -d 'Require this token from both sides (Authorization: Bearer); prefer VOXA_RELAY_TOKEN or --relay-token-file, a flag\'s value is visible to every user in `ps`' -r
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l metrics-listen -d 'Serve Prometheus metrics at http://ADDR/metrics (keep it private: no authentication)' -r
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l max-connections-per-ip -d 'Connections one client address (IPv4, or IPv6 /64) may hold; 0 for no limit (behind a proxy)' -r
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l memory-budget -d 'Memory for messages in flight, in MiB (default 256); over it the oldest heavy socket is closed' -r
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l relay-token-file -d 'Read the relay token from this file (first line; the file must not be readable by others)' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l gemini-key-file -d 'Host voice calls at /live with the Gemini API key in this file (else GEMINI_API_KEY)' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l live-max-calls -d 'Hosted voice calls at once; more get call_error at-capacity' -r
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l live-max-minutes -d 'Longest hosted voice call, in minutes' -r
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l live-calls-per-address -d 'Hosted voice calls one client address runs at once; more get call_error too-many-calls' -r
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l live-starts-per-minute -d 'Hosted voice calls one client address starts per minute; more get call_error too-many-calls' -r
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l live-client-header -d 'Take a /live client\'s address from this request header (e.g. X-Forwarded-For), set by a trusted proxy in front of the relay; only when clients cannot reach the relay but through it' -r
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l live-minutes-per-day -d 'Minutes of hosted calls per UTC day on your Gemini key (0 for no limit); counted in the home' -r
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l live-model -d 'Gemini Live model for hosted calls' -r
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l open-live -d 'Host /live for anyone who asks, without VOXA_PROXY_TOKEN or a relay token: every call spends your Gemini key (without it, a relay with a key and no token refuses to start)'
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand relay" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand relay" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand relay" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand relay" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand relay" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand env; and not __fish_seen_subcommand_from issue add list revoke remove help" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand env; and not __fish_seen_subcommand_from issue add list revoke remove help" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand env; and not __fish_seen_subcommand_from issue add list revoke remove help" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand env; and not __fish_seen_subcommand_from issue add list revoke remove help" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand env; and not __fish_seen_subcommand_from issue add list revoke remove help" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand env; and not __fish_seen_subcommand_from issue add list revoke remove help" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand env; and not __fish_seen_subcommand_from issue add list revoke remove help" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand env; and not __fish_seen_subcommand_from issue add list revoke remove help" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand env; and not __fish_seen_subcommand_from issue add list revoke remove help" -f -a "issue" -d 'On an environment: issue a pairing and print the line to paste on the host'
complete -c voxa -n "__fish_voxa_using_subcommand env; and not __fish_seen_subcommand_from issue add list revoke remove help" -f -a "add" -d 'On the host: record an environment from the line `voxa env issue` printed'
complete -c voxa -n "__fish_voxa_using_subcommand env; and not __fish_seen_subcommand_from issue add list revoke remove help" -f -a "list" -d 'List known environments and whether they answer'
complete -c voxa -n "__fish_voxa_using_subcommand env; and not __fish_seen_subcommand_from issue add list revoke remove help" -f -a "revoke" -d 'On an environment: revoke a pairing (by id, bearer or envKey) and close its sessions'
complete -c voxa -n "__fish_voxa_using_subcommand env; and not __fish_seen_subcommand_from issue add list revoke remove help" -f -a "remove" -d 'On the host: forget an environment'
complete -c voxa -n "__fish_voxa_using_subcommand env; and not __fish_seen_subcommand_from issue add list revoke remove help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from issue" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from issue" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from issue" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from issue" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from issue" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from issue" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from issue" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from issue" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from add" -l name -d 'A short name for the environment' -r
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from add" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from add" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from add" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from add" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from add" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from add" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from add" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from add" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from list" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from list" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from list" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from list" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from list" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from list" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from revoke" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from revoke" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from revoke" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from revoke" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from revoke" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from revoke" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from revoke" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from revoke" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from remove" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from remove" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from remove" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from remove" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from remove" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from remove" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from remove" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from remove" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from help" -f -a "issue" -d 'On an environment: issue a pairing and print the line to paste on the host'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from help" -f -a "add" -d 'On the host: record an environment from the line `voxa env issue` printed'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from help" -f -a "list" -d 'List known environments and whether they answer'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from help" -f -a "revoke" -d 'On an environment: revoke a pairing (by id, bearer or envKey) and close its sessions'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from help" -f -a "remove" -d 'On the host: forget an environment'
complete -c voxa -n "__fish_voxa_using_subcommand env; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c voxa -n "__fish_voxa_using_subcommand open" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand open" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand open" -l no-browser -d 'Print the link (with the token in its fragment) instead of opening a browser'
complete -c voxa -n "__fish_voxa_using_subcommand open" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand open" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand open" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand open" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand open" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand open" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand service; and not __fish_seen_subcommand_from install uninstall status logs help" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand service; and not __fish_seen_subcommand_from install uninstall status logs help" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand service; and not __fish_seen_subcommand_from install uninstall status logs help" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand service; and not __fish_seen_subcommand_from install uninstall status logs help" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand service; and not __fish_seen_subcommand_from install uninstall status logs help" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand service; and not __fish_seen_subcommand_from install uninstall status logs help" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand service; and not __fish_seen_subcommand_from install uninstall status logs help" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand service; and not __fish_seen_subcommand_from install uninstall status logs help" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand service; and not __fish_seen_subcommand_from install uninstall status logs help" -f -a "install" -d 'Write the service file and start it now and at every login (twice is harmless)'
complete -c voxa -n "__fish_voxa_using_subcommand service; and not __fish_seen_subcommand_from install uninstall status logs help" -f -a "uninstall" -d 'Stop the service and remove its file'
complete -c voxa -n "__fish_voxa_using_subcommand service; and not __fish_seen_subcommand_from install uninstall status logs help" -f -a "status" -d 'Whether the service is installed, enabled and running'
complete -c voxa -n "__fish_voxa_using_subcommand service; and not __fish_seen_subcommand_from install uninstall status logs help" -f -a "logs" -d 'Show the service\'s recent log lines'
complete -c voxa -n "__fish_voxa_using_subcommand service; and not __fish_seen_subcommand_from install uninstall status logs help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from install" -l workspace -d 'Root the service\'s tools are confined to [default: the current directory]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from install" -l ca-cert -d 'Extra CA certificate (PEM) the service trusts for the relay\'s TLS' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from install" -l relay-token -d 'Token the relay requires; saved in the home (0600) for the service, never in its file' -r
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from install" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from install" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from install" -l dry-run -d 'Print the service file and where it would go; change nothing'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from install" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from install" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from install" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from install" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from install" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from install" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from uninstall" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from uninstall" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from uninstall" -l dry-run -d 'Say what would be stopped and removed; change nothing'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from uninstall" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from uninstall" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from uninstall" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from uninstall" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from uninstall" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from uninstall" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from status" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from status" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from status" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from status" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from status" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from status" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from status" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from status" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from logs" -s n -l lines -d 'How many recent lines to show' -r
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from logs" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from logs" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from logs" -s f -l follow -d 'Keep printing new lines as they come'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from logs" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from logs" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from logs" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from logs" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from logs" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from logs" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from help" -f -a "install" -d 'Write the service file and start it now and at every login (twice is harmless)'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from help" -f -a "uninstall" -d 'Stop the service and remove its file'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from help" -f -a "status" -d 'Whether the service is installed, enabled and running'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from help" -f -a "logs" -d 'Show the service\'s recent log lines'
complete -c voxa -n "__fish_voxa_using_subcommand service; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c voxa -n "__fish_voxa_using_subcommand doctor" -l ca-cert -d 'Extra CA certificate (PEM) to trust for the relay\'s TLS, as `voxa run --ca-cert`' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand doctor" -l relay-token -d 'Token the relay requires (checked against the relay, never printed) [default: saved in the home]' -r
complete -c voxa -n "__fish_voxa_using_subcommand doctor" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand doctor" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand doctor" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand doctor" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand doctor" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand doctor" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand doctor" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand doctor" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand notify; and not __fish_seen_subcommand_from test help" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand notify; and not __fish_seen_subcommand_from test help" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand notify; and not __fish_seen_subcommand_from test help" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand notify; and not __fish_seen_subcommand_from test help" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand notify; and not __fish_seen_subcommand_from test help" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand notify; and not __fish_seen_subcommand_from test help" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand notify; and not __fish_seen_subcommand_from test help" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand notify; and not __fish_seen_subcommand_from test help" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand notify; and not __fish_seen_subcommand_from test help" -f -a "test" -d 'Send one notification to every subscribed browser and show what each push service answered'
complete -c voxa -n "__fish_voxa_using_subcommand notify; and not __fish_seen_subcommand_from test help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c voxa -n "__fish_voxa_using_subcommand notify; and __fish_seen_subcommand_from test" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand notify; and __fish_seen_subcommand_from test" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand notify; and __fish_seen_subcommand_from test" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand notify; and __fish_seen_subcommand_from test" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand notify; and __fish_seen_subcommand_from test" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand notify; and __fish_seen_subcommand_from test" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand notify; and __fish_seen_subcommand_from test" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand notify; and __fish_seen_subcommand_from test" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand notify; and __fish_seen_subcommand_from help" -f -a "test" -d 'Send one notification to every subscribed browser and show what each push service answered'
complete -c voxa -n "__fish_voxa_using_subcommand notify; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c voxa -n "__fish_voxa_using_subcommand completions" -l home -d 'State directory holding the secrets and settings [default: ~/.voxa]' -r -F
complete -c voxa -n "__fish_voxa_using_subcommand completions" -l relay -d 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]' -r
complete -c voxa -n "__fish_voxa_using_subcommand completions" -l self-hosted -d 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
complete -c voxa -n "__fish_voxa_using_subcommand completions" -l json -d 'Print JSON (one object per line for event streams) instead of text'
complete -c voxa -n "__fish_voxa_using_subcommand completions" -s v -l verbose -d 'More log output on stderr (-v info, -vv debug, -vvv trace)'
complete -c voxa -n "__fish_voxa_using_subcommand completions" -s q -l quiet -d 'Only errors'
complete -c voxa -n "__fish_voxa_using_subcommand completions" -s h -l help -d 'Print help'
complete -c voxa -n "__fish_voxa_using_subcommand completions" -s V -l version -d 'Print version'
complete -c voxa -n "__fish_voxa_using_subcommand help; and not __fish_seen_subcommand_from pair run status call approvals approve agent relay env open service doctor notify completions help" -f -a "pair" -d 'Create the secrets if missing and print the QR code and pairing URL'
complete -c voxa -n "__fish_voxa_using_subcommand help; and not __fish_seen_subcommand_from pair run status call approvals approve agent relay env open service doctor notify completions help" -f -a "run" -d 'Stay connected: loopback server plus relay dialer, until Ctrl-C (the default command)'
complete -c voxa -n "__fish_voxa_using_subcommand help; and not __fish_seen_subcommand_from pair run status call approvals approve agent relay env open service doctor notify completions help" -f -a "status" -d 'Show whether this machine is paired and what the running agent is doing'
complete -c voxa -n "__fish_voxa_using_subcommand help; and not __fish_seen_subcommand_from pair run status call approvals approve agent relay env open service doctor notify completions help" -f -a "call" -d 'Run one tool through the running agent and print its result'
complete -c voxa -n "__fish_voxa_using_subcommand help; and not __fish_seen_subcommand_from pair run status call approvals approve agent relay env open service doctor notify completions help" -f -a "approvals" -d 'List the approvals waiting for a decision in the running agent; its grants; revoke one'
complete -c voxa -n "__fish_voxa_using_subcommand help; and not __fish_seen_subcommand_from pair run status call approvals approve agent relay env open service doctor notify completions help" -f -a "approve" -d 'Answer an approval: allow or deny it'
complete -c voxa -n "__fish_voxa_using_subcommand help; and not __fish_seen_subcommand_from pair run status call approvals approve agent relay env open service doctor notify completions help" -f -a "agent" -d 'Coding-agent sessions of the running agent: start, send, log, list, interrupt, stop'
complete -c voxa -n "__fish_voxa_using_subcommand help; and not __fish_seen_subcommand_from pair run status call approvals approve agent relay env open service doctor notify completions help" -f -a "relay" -d 'Run a relay server'
complete -c voxa -n "__fish_voxa_using_subcommand help; and not __fish_seen_subcommand_from pair run status call approvals approve agent relay env open service doctor notify completions help" -f -a "env" -d 'Drive other machines from this one (multi-environment pairing)'
complete -c voxa -n "__fish_voxa_using_subcommand help; and not __fish_seen_subcommand_from pair run status call approvals approve agent relay env open service doctor notify completions help" -f -a "open" -d 'Open the web client of the running agent in the default browser'
complete -c voxa -n "__fish_voxa_using_subcommand help; and not __fish_seen_subcommand_from pair run status call approvals approve agent relay env open service doctor notify completions help" -f -a "service" -d 'Keep `voxa run` running at login (systemd user unit on Linux, launchd agent on macOS)'
complete -c voxa -n "__fish_voxa_using_subcommand help; and not __fish_seen_subcommand_from pair run status call approvals approve agent relay env open service doctor notify completions help" -f -a "doctor" -d 'Check this setup, one line per check, and say how to fix what is wrong'
complete -c voxa -n "__fish_voxa_using_subcommand help; and not __fish_seen_subcommand_from pair run status call approvals approve agent relay env open service doctor notify completions help" -f -a "notify" -d 'Phone notifications (Web Push): send a test to every subscribed browser'
complete -c voxa -n "__fish_voxa_using_subcommand help; and not __fish_seen_subcommand_from pair run status call approvals approve agent relay env open service doctor notify completions help" -f -a "completions" -d 'Print a shell completion script'
complete -c voxa -n "__fish_voxa_using_subcommand help; and not __fish_seen_subcommand_from pair run status call approvals approve agent relay env open service doctor notify completions help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c voxa -n "__fish_voxa_using_subcommand help; and __fish_seen_subcommand_from approvals" -f -a "grants" -d 'List the grants "Allow for session" made: what each lets through without asking'
complete -c voxa -n "__fish_voxa_using_subcommand help; and __fish_seen_subcommand_from approvals" -f -a "revoke" -d 'End a grant: what it let through asks again'
complete -c voxa -n "__fish_voxa_using_subcommand help; and __fish_seen_subcommand_from agent" -f -a "start" -d 'Start a session with PROMPT and follow its first turn until it ends'
complete -c voxa -n "__fish_voxa_using_subcommand help; and __fish_seen_subcommand_from agent" -f -a "send" -d 'Send SESSION a turn and follow it until it ends (an ended session is resumed first)'
complete -c voxa -n "__fish_voxa_using_subcommand help; and __fish_seen_subcommand_from agent" -f -a "log" -d 'Print SESSION\'s events, oldest first'
complete -c voxa -n "__fish_voxa_using_subcommand help; and __fish_seen_subcommand_from agent" -f -a "list" -d 'List the sessions, most recent first'
complete -c voxa -n "__fish_voxa_using_subcommand help; and __fish_seen_subcommand_from agent" -f -a "interrupt" -d 'End SESSION\'s running turn (the session stays)'
complete -c voxa -n "__fish_voxa_using_subcommand help; and __fish_seen_subcommand_from agent" -f -a "stop" -d 'End SESSION\'s agent process (the session stays listed and resumable)'
complete -c voxa -n "__fish_voxa_using_subcommand help; and __fish_seen_subcommand_from env" -f -a "issue" -d 'On an environment: issue a pairing and print the line to paste on the host'
complete -c voxa -n "__fish_voxa_using_subcommand help; and __fish_seen_subcommand_from env" -f -a "add" -d 'On the host: record an environment from the line `voxa env issue` printed'
complete -c voxa -n "__fish_voxa_using_subcommand help; and __fish_seen_subcommand_from env" -f -a "list" -d 'List known environments and whether they answer'
complete -c voxa -n "__fish_voxa_using_subcommand help; and __fish_seen_subcommand_from env" -f -a "revoke" -d 'On an environment: revoke a pairing (by id, bearer or envKey) and close its sessions'
complete -c voxa -n "__fish_voxa_using_subcommand help; and __fish_seen_subcommand_from env" -f -a "remove" -d 'On the host: forget an environment'
complete -c voxa -n "__fish_voxa_using_subcommand help; and __fish_seen_subcommand_from service" -f -a "install" -d 'Write the service file and start it now and at every login (twice is harmless)'
complete -c voxa -n "__fish_voxa_using_subcommand help; and __fish_seen_subcommand_from service" -f -a "uninstall" -d 'Stop the service and remove its file'
complete -c voxa -n "__fish_voxa_using_subcommand help; and __fish_seen_subcommand_from service" -f -a "status" -d 'Whether the service is installed, enabled and running'
complete -c voxa -n "__fish_voxa_using_subcommand help; and __fish_seen_subcommand_from service" -f -a "logs" -d 'Show the service\'s recent log lines'
complete -c voxa -n "__fish_voxa_using_subcommand help; and __fish_seen_subcommand_from notify" -f -a "test" -d 'Send one notification to every subscribed browser and show what each push service answered'
