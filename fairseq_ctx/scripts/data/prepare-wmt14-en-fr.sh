#!/usr/bin/env bash
# wmt14-en-fr as in the papers (see prepare-wmt.sh --help for the options).
exec bash "$(dirname "$0")/prepare-wmt.sh" --corpus wmt14-en-fr "$@"
