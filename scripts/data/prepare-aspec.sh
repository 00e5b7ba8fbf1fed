#!/usr/bin/env bash
# The data-preparation scripts ship with the package (fairseq_ctx/scripts/data/prepare-aspec.sh;
# installed: `fairseq-ctx-prepare-data aspec`). This checkout path runs it with the same options.
exec bash "$(dirname "$0")/../../fairseq_ctx/scripts/data/prepare-aspec.sh" "$@"
