#!/usr/bin/env bash
# wmt17-zh-en as in the papers (see prepare-wmt.sh --help for the options).
exec bash "$(dirname "$0")/prepare-wmt.sh" --corpus wmt17-zh-en "$@"
