#!/usr/bin/env bash
# The data-preparation scripts ship with the package (fairseq_ctx/scripts/data/prepare-wmt14-en-fr.sh;
# installed: `fairseq-ctx-prepare-data wmt14-en-fr`). This checkout path runs it with the same options.
exec bash "$(dirname "$0")/../../fairseq_ctx/scripts/data/prepare-wmt14-en-fr.sh" "$@"
