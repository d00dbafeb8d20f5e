
use builtin;
use str;

set edit:completion:arg-completer[voxa] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'voxa'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'voxa'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
            cand pair 'Create the secrets if missing and print the QR code and pairing URL'
            cand run 'Stay connected: loopback server plus relay dialer, until Ctrl-C (the default command)'
            cand status 'Show whether this machine is paired and what the running agent is doing'
            cand call 'Run one tool through the running agent and print its result'
            cand approvals 'List the approvals waiting for a decision in the running agent; its grants; revoke one'
            cand approve 'Answer an approval: allow or deny it'
            cand agent 'Coding-agent sessions of the running agent: start, send, log, list, interrupt, stop'
            cand relay 'Run a relay server'
            cand env 'Drive other machines from this one (multi-environment pairing)'
            cand open 'Open the web client of the running agent in the default browser'
            cand service 'Keep `voxa run` running at login (systemd user unit on Linux, launchd agent on macOS)'
            cand doctor 'Check this setup, one line per check, and say how to fix what is wrong'
            cand notify 'Phone notifications (Web Push): send a test to every subscribed browser'
            cand completions 'Print a shell completion script'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'voxa;pair'= {
            cand --relay-token 'Token the relay requires, put in the link''s fragment for the page to present (else the one saved in the home); prefer VOXA_RELAY_TOKEN or --relay-token-file'
            cand --relay-token-file 'Read the relay token for the link from this file (first line; not readable by others)'
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --rotate 'Replace both secrets (the phone must scan the new code)'
            cand --no-qr 'Print the URL without the QR code'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;run'= {
            cand --port 'Loopback port for local clients (0 picks a free one)'
            cand --workspace 'Root that file tools and commands are confined to [default: the current directory]'
            cand --embedded-relay 'Run a relay inside this process on a loopback address and dial it (for trying voxa offline)'
            cand --lan 'Run a relay inside this process for phones on this network: on this machine''s address there (or ADDR, as 192.168.1.20 or 192.168.1.20:8443), over HTTPS with a certificate of its own, whose fingerprint it prints (for a network you trust; docs/GUIDE.md)'
            cand --ca-cert 'Extra CA certificate (PEM) to trust for the relay''s TLS, e.g. a self-signed relay'
            cand --relay-token 'Token the relay requires (sent as Authorization: Bearer); prefer VOXA_RELAY_TOKEN or --relay-token-file, a flag''s value is visible to every user in `ps`'
            cand --relay-token-file 'Read the relay token from this file (first line; the file must not be readable by others)'
            cand --model 'Gemini Live model for self-hosted mode (default gemini-3.8-live, or [gemini] model in config.toml)'
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;status'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;call'= {
            cand --env 'Route the call to a paired environment (its envKey or name)'
            cand -o 'Where `screenshot` saves the image [default: screenshot-<UTC time>.png in the current directory]'
            cand --out 'Where `screenshot` saves the image [default: screenshot-<UTC time>.png in the current directory]'
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;approvals'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
            cand grants 'List the grants "Allow for session" made: what each lets through without asking'
            cand revoke 'End a grant: what it let through asks again'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'voxa;approvals;grants'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;approvals;revoke'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;approvals;help'= {
            cand grants 'List the grants "Allow for session" made: what each lets through without asking'
            cand revoke 'End a grant: what it let through asks again'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'voxa;approvals;help;grants'= {
        }
        &'voxa;approvals;help;revoke'= {
        }
        &'voxa;approvals;help;help'= {
        }
        &'voxa;approve'= {
            cand -m 'Why: the asker reads it (a coding agent, or the caller of a denied tool)'
            cand --message 'Why: the asker reads it (a coding agent, or the caller of a denied tool)'
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;agent'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
            cand start 'Start a session with PROMPT and follow its first turn until it ends'
            cand send 'Send SESSION a turn and follow it until it ends (an ended session is resumed first)'
            cand log 'Print SESSION''s events, oldest first'
            cand list 'List the sessions, most recent first'
            cand interrupt 'End SESSION''s running turn (the session stays)'
            cand stop 'End SESSION''s agent process (the session stays listed and resumable)'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'voxa;agent;start'= {
            cand --agent 'Which coding agent (claude, or one configured in config.toml [agents])'
            cand --cwd 'Where it works, relative to the workspace [default: the workspace]'
            cand --title 'The session''s title [default: the prompt''s first line]'
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --detach 'Print the session''s id and return at once'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;agent;send'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --detach 'Return once it is sent'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;agent;log'= {
            cand --after 'Only the events after this seq'
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand -f 'Then wait for more, until interrupted'
            cand --follow 'Then wait for more, until interrupted'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;agent;list'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;agent;interrupt'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;agent;stop'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;agent;help'= {
            cand start 'Start a session with PROMPT and follow its first turn until it ends'
            cand send 'Send SESSION a turn and follow it until it ends (an ended session is resumed first)'
            cand log 'Print SESSION''s events, oldest first'
            cand list 'List the sessions, most recent first'
            cand interrupt 'End SESSION''s running turn (the session stays)'
            cand stop 'End SESSION''s agent process (the session stays listed and resumable)'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'voxa;agent;help;start'= {
        }
        &'voxa;agent;help;send'= {
        }
        &'voxa;agent;help;log'= {
        }
        &'voxa;agent;help;list'= {
        }
        &'voxa;agent;help;interrupt'= {
        }
        &'voxa;agent;help;stop'= {
        }
        &'voxa;agent;help;help'= {
        }
        &'voxa;relay'= {
            cand --listen 'Address to listen on'
            cand --tls-cert 'TLS certificate chain (PEM); serve wss:// with --tls-key'
            cand --domain 'Serve wss:// for this DNS name with a certificate the relay obtains and renews itself by ACME (TLS-ALPN-01: the name must resolve here and reach --listen on port 443); kept in the home'
            cand --acme-directory 'ACME directory of the CA that issues the --domain certificate (a staging or company CA)'
            cand --acme-ca-file 'Trust this PEM root for the ACME server''s own HTTPS (one not in the system roots)'
            cand --tls-key 'TLS private key (PEM)'
            cand --relay-token 'Require this token from both sides (Authorization: Bearer); prefer VOXA_RELAY_TOKEN or --relay-token-file, a flag''s value is visible to every user in `ps`'
            cand --metrics-listen 'Serve Prometheus metrics at http://ADDR/metrics (keep it private: no authentication)'
            cand --max-connections-per-ip 'Connections one client address (IPv4, or IPv6 /64) may hold; 0 for no limit (behind a proxy)'
            cand --memory-budget 'Memory for messages in flight, in MiB (default 256); over it the oldest heavy socket is closed'
            cand --relay-token-file 'Read the relay token from this file (first line; the file must not be readable by others)'
            cand --gemini-key-file 'Host voice calls at /live with the Gemini API key in this file (else GEMINI_API_KEY)'
            cand --live-max-calls 'Hosted voice calls at once; more get call_error at-capacity'
            cand --live-max-minutes 'Longest hosted voice call, in minutes'
            cand --live-calls-per-address 'Hosted voice calls one client address runs at once; more get call_error too-many-calls'
            cand --live-starts-per-minute 'Hosted voice calls one client address starts per minute; more get call_error too-many-calls'
            cand --live-client-header 'Take a /live client''s address from this request header (e.g. X-Forwarded-For), set by a trusted proxy in front of the relay; only when clients cannot reach the relay but through it'
            cand --live-minutes-per-day 'Minutes of hosted calls per UTC day on your Gemini key (0 for no limit); counted in the home'
            cand --live-model 'Gemini Live model for hosted calls'
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --open-live 'Host /live for anyone who asks, without VOXA_PROXY_TOKEN or a relay token: every call spends your Gemini key (without it, a relay with a key and no token refuses to start)'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;env'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
            cand issue 'On an environment: issue a pairing and print the line to paste on the host'
            cand add 'On the host: record an environment from the line `voxa env issue` printed'
            cand list 'List known environments and whether they answer'
            cand revoke 'On an environment: revoke a pairing (by id, bearer or envKey) and close its sessions'
            cand remove 'On the host: forget an environment'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'voxa;env;issue'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;env;add'= {
            cand --name 'A short name for the environment'
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;env;list'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;env;revoke'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;env;remove'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;env;help'= {
            cand issue 'On an environment: issue a pairing and print the line to paste on the host'
            cand add 'On the host: record an environment from the line `voxa env issue` printed'
            cand list 'List known environments and whether they answer'
            cand revoke 'On an environment: revoke a pairing (by id, bearer or envKey) and close its sessions'
            cand remove 'On the host: forget an environment'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'voxa;env;help;issue'= {
        }
        &'voxa;env;help;add'= {
        }
        &'voxa;env;help;list'= {
        }
        &'voxa;env;help;revoke'= {
        }
        &'voxa;env;help;remove'= {
        }
        &'voxa;env;help;help'= {
        }
        &'voxa;open'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --no-browser 'Print the link (with the token in its fragment) instead of opening a browser'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;service'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
            cand install 'Write the service file and start it now and at every login (twice is harmless)'
            cand uninstall 'Stop the service and remove its file'
            cand status 'Whether the service is installed, enabled and running'
            cand logs 'Show the service''s recent log lines'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'voxa;service;install'= {
            cand --workspace 'Root the service''s tools are confined to [default: the current directory]'
            cand --ca-cert 'Extra CA certificate (PEM) the service trusts for the relay''s TLS'
            cand --relay-token 'Token the relay requires; saved in the home (0600) for the service, never in its file'
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --dry-run 'Print the service file and where it would go; change nothing'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;service;uninstall'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --dry-run 'Say what would be stopped and removed; change nothing'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;service;status'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;service;logs'= {
            cand -n 'How many recent lines to show'
            cand --lines 'How many recent lines to show'
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand -f 'Keep printing new lines as they come'
            cand --follow 'Keep printing new lines as they come'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;service;help'= {
            cand install 'Write the service file and start it now and at every login (twice is harmless)'
            cand uninstall 'Stop the service and remove its file'
            cand status 'Whether the service is installed, enabled and running'
            cand logs 'Show the service''s recent log lines'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'voxa;service;help;install'= {
        }
        &'voxa;service;help;uninstall'= {
        }
        &'voxa;service;help;status'= {
        }
        &'voxa;service;help;logs'= {
        }
        &'voxa;service;help;help'= {
        }
        &'voxa;doctor'= {
            cand --ca-cert 'Extra CA certificate (PEM) to trust for the relay''s TLS, as `voxa run --ca-cert`'
            cand --relay-token 'Token the relay requires (checked against the relay, never printed) [default: saved in the home]'
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;notify'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
            cand test 'Send one notification to every subscribed browser and show what each push service answered'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'voxa;notify;test'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;notify;help'= {
            cand test 'Send one notification to every subscribed browser and show what each push service answered'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'voxa;notify;help;test'= {
        }
        &'voxa;notify;help;help'= {
        }
        &'voxa;completions'= {
            cand --home 'State directory holding the secrets and settings [default: ~/.voxa]'
            cand --relay 'Relay to pair with and dial (https://…; http:// only for loopback); repeat it for up to 3, each dialed, the phone using the first that answers [default: saved, else https://api.voxa.space]'
            cand --self-hosted 'Host the Gemini Live voice session on this laptop (needs GEMINI_API_KEY)'
            cand --json 'Print JSON (one object per line for event streams) instead of text'
            cand -v 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand --verbose 'More log output on stderr (-v info, -vv debug, -vvv trace)'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'voxa;help'= {
            cand pair 'Create the secrets if missing and print the QR code and pairing URL'
            cand run 'Stay connected: loopback server plus relay dialer, until Ctrl-C (the default command)'
            cand status 'Show whether this machine is paired and what the running agent is doing'
            cand call 'Run one tool through the running agent and print its result'
            cand approvals 'List the approvals waiting for a decision in the running agent; its grants; revoke one'
            cand approve 'Answer an approval: allow or deny it'
            cand agent 'Coding-agent sessions of the running agent: start, send, log, list, interrupt, stop'
            cand relay 'Run a relay server'
            cand env 'Drive other machines from this one (multi-environment pairing)'
            cand open 'Open the web client of the running agent in the default browser'
            cand service 'Keep `voxa run` running at login (systemd user unit on Linux, launchd agent on macOS)'
            cand doctor 'Check this setup, one line per check, and say how to fix what is wrong'
            cand notify 'Phone notifications (Web Push): send a test to every subscribed browser'
            cand completions 'Print a shell completion script'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'voxa;help;pair'= {
        }
        &'voxa;help;run'= {
        }
        &'voxa;help;status'= {
        }
        &'voxa;help;call'= {
        }
        &'voxa;help;approvals'= {
            cand grants 'List the grants "Allow for session" made: what each lets through without asking'
            cand revoke 'End a grant: what it let through asks again'
        }
        &'voxa;help;approvals;grants'= {
        }
        &'voxa;help;approvals;revoke'= {
        }
        &'voxa;help;approve'= {
        }
        &'voxa;help;agent'= {
            cand start 'Start a session with PROMPT and follow its first turn until it ends'
            cand send 'Send SESSION a turn and follow it until it ends (an ended session is resumed first)'
            cand log 'Print SESSION''s events, oldest first'
            cand list 'List the sessions, most recent first'
            cand interrupt 'End SESSION''s running turn (the session stays)'
            cand stop 'End SESSION''s agent process (the session stays listed and resumable)'
        }
        &'voxa;help;agent;start'= {
        }
        &'voxa;help;agent;send'= {
        }
        &'voxa;help;agent;log'= {
        }
        &'voxa;help;agent;list'= {
        }
        &'voxa;help;agent;interrupt'= {
        }
        &'voxa;help;agent;stop'= {
        }
        &'voxa;help;relay'= {
        }
        &'voxa;help;env'= {
            cand issue 'On an environment: issue a pairing and print the line to paste on the host'
            cand add 'On the host: record an environment from the line `voxa env issue` printed'
            cand list 'List known environments and whether they answer'
            cand revoke 'On an environment: revoke a pairing (by id, bearer or envKey) and close its sessions'
            cand remove 'On the host: forget an environment'
        }
        &'voxa;help;env;issue'= {
        }
        &'voxa;help;env;add'= {
        }
        &'voxa;help;env;list'= {
        }
        &'voxa;help;env;revoke'= {
        }
        &'voxa;help;env;remove'= {
        }
        &'voxa;help;open'= {
        }
        &'voxa;help;service'= {
            cand install 'Write the service file and start it now and at every login (twice is harmless)'
            cand uninstall 'Stop the service and remove its file'
            cand status 'Whether the service is installed, enabled and running'
            cand logs 'Show the service''s recent log lines'
        }
        &'voxa;help;service;install'= {
        }
        &'voxa;help;service;uninstall'= {
        }
        &'voxa;help;service;status'= {
        }
        &'voxa;help;service;logs'= {
        }
        &'voxa;help;doctor'= {
        }
        &'voxa;help;notify'= {
            cand test 'Send one notification to every subscribed browser and show what each push service answered'
        }
        &'voxa;help;notify;test'= {
        }
        &'voxa;help;completions'= {
        }
        &'voxa;help;help'= {
        }
    ]
    $completions[$command]
}
