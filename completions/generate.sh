#!/usr/bin/env bash
# Regenerates the committed shell completion scripts from the binary.
# The test `cli::committed_completions_match_the_binary` fails until this has been run after a CLI change.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --bin voxa
while read -r shell file; do
    cargo run --quiet --bin voxa -- completions "$shell" >"completions/$file"
    echo "completions/$file"
done <<'LIST'
bash voxa.bash
zsh _voxa
fish voxa.fish
elvish voxa.elv
powershell _voxa.ps1
LIST
