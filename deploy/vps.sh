#!/usr/bin/env bash
# A voxa relay on a VPS in one command, with its own certificate:
#   sudo bash deploy/vps.sh relay.example.com [path/to/voxa]
# Before: the name's A/AAAA records point at this machine and port 443 is open to the internet
# (the CA validates through it). Installs the binary (default target/release/voxa) as
# /usr/local/bin/voxa and deploy/systemd/voxa-relay-domain.service, then starts it.
set -euo pipefail
domain="${1:?usage: sudo bash deploy/vps.sh relay.example.com [path/to/voxa]}"
binary="${2:-$(dirname "${BASH_SOURCE[0]}")/../target/release/voxa}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

install -m 0755 "$binary" /usr/local/bin/voxa
install -d -m 0700 /etc/voxa
env_file=/etc/voxa/relay-domain.env
touch "$env_file" && chmod 0600 "$env_file"
grep -v '^VOXA_DOMAIN=' "$env_file" > "$env_file.new" || true
echo "VOXA_DOMAIN=$domain" >> "$env_file.new"
install -m 0600 "$env_file.new" "$env_file" && rm -f "$env_file.new"
install -m 0644 "$here/systemd/voxa-relay-domain.service" /etc/systemd/system/
systemctl daemon-reload
systemctl enable --now voxa-relay-domain
echo "voxa relay starting on https://$domain (journalctl -u voxa-relay-domain -f shows the certificate arrive)"
echo "pair a laptop with: voxa --relay https://$domain pair"
