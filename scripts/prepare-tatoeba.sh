#!/usr/bin/env bash
# The Tatoeba preparation script ships with the package (fairseq_ctx/scripts/prepare-tatoeba.sh;
# installed: `fairseq-ctx-prepare-data tatoeba`). This checkout path runs it with the same options.
exec bash "$(dirname "$0")/../fairseq_ctx/scripts/prepare-tatoeba.sh" "$@"
