#!/usr/bin/env bash
# Regenerates the committed man pages from the clap definitions.
# The test `cli::committed_man_pages_match_the_cli` fails until this has been run after a CLI change.
set -euo pipefail
cd "$(dirname "$0")/.."
VOXA_UPDATE_MAN=1 cargo test --quiet --test it cli::committed_man_pages_match_the_cli >/dev/null
ls man/*.1
