# Shared by scripts/prepare-tatoeba.sh and scripts/data/prepare-*.sh (sourced): the step / atomic-rename / settings
# pattern of scripts/prepare-tatoeba.sh.
#   check_settings "STRING"   check the tools ($src, $tgt), refuse to reuse $out prepared with other settings
#                             (once a step of theirs finished: an attempt that finished none holds nothing of them)
#   run_step NAME FUNC        FUNC fills "$partial"; renamed to $out/NAME on success only
PY=${PY:-python}
FAIRSEQ_PREPROCESS=${FAIRSEQ_PREPROCESS:-fairseq-preprocess}
# the python data tools never build a model: skip fairseq_ctx's model registration
# (importing fairseq costs ~5 s of CPU per process)
export FAIRSEQ_CTX_NO_MODELS=1
# the CPUs this job may use (SLURM allocation, taskset, a container's CPU quota); not `nproc`,
# which obeys OMP_NUM_THREADS
WORKERS=${WORKERS:-$($PY -c 'from fairseq_ctx.data.streaming import default_workers; print(default_workers())' 2>/dev/null || nproc --all 2>/dev/null || echo 1)}

die() { echo "$prog: $*" >&2; exit 2; }
# an option that takes a value (`--out DIR`): one message where the value is missing
needs_value() { [ $# -ge 2 ] && [[ $2 != --* ]] || die "$1 needs a value (see --help)"; }

# PY and fairseq-preprocess must be those of the environment fairseq-ctx is installed in:
# said in one line before any step (download, extraction) runs, not in a traceback after it.
# require_tools LANG...: the tokenisers of these languages as well
require_tools() {
    local missing errors
    errors=$(mktemp)
    # stdout only: a site's startup messages on stderr are not missing modules
    missing=$($PY -c 'import importlib.util, sys
by_lang = {"zh": ["jieba"], "ja": ["fugashi", "unidic_lite"]}
need = ["fairseq_ctx", "sacremoses", "subword_nmt", "sentencepiece"] + [m for l in sys.argv[1:] for m in by_lang.get(l, [])]
print(" ".join(m for m in need if importlib.util.find_spec(m) is None))' "$@" 2>"$errors") \
        || missing="anything ($(tail -n 1 "$errors"))"
    rm -f "$errors"
    case " $missing " in
        " fugashi "*|" unidic_lite "*|" fugashi unidic_lite ")
            die "$PY cannot import $missing: Japanese needs the ja extra (pip install 'fairseq-ctx[ja]'," \
                "or pip install -e '.[ja]' in a checkout)" ;;
    esac
    [ -z "$missing" ] || die "$PY cannot import $missing: run this in the environment fairseq-ctx is" \
        "installed in (\`make setup\` and \`. .venv/bin/activate\` in a checkout; or the installed" \
        "\`fairseq-ctx-prepare-data\`), or set PY=/path/to/its/python"
    # its first word: FAIRSEQ_PREPROCESS may be a command line ("python -m fairseq_cli.preprocess")
    command -v "${FAIRSEQ_PREPROCESS%% *}" > /dev/null \
        || die "$FAIRSEQ_PREPROCESS not found: activate the environment fairseq is installed in, or set FAIRSEQ_PREPROCESS"
}

check_settings() {
    require_tools ${src:-} ${tgt:-}
    echo "$prog: $WORKERS worker processes (environment WORKERS=N to change)"
    mkdir -p "$out"
    # one preparation of $out at a time (held on fd 9 until this script and the workers it
    # started exit): another one would delete this one's *.partial steps, and with other
    # settings take the directory over. Without flock (macOS), or where $out cannot be written
    # or locked (a shared read-only copy, some network filesystems), no lock: said, not fatal.
    if [ -z "${PREPARE_LOCK_HELD:-}" ]; then
        if ! command -v flock > /dev/null; then
            echo "$prog: no flock here: two preparations of $out at once would not be stopped" >&2
        elif { exec 9>> "$out/.lock"; } 2> /dev/null; then  # (appending writes nothing: never changed)
            local held=0
            flock -n 9 || held=$?
            [ "$held" -ne 1 ] || die "$out is being prepared by another run: wait for it, or pass another --out"
            [ "$held" -eq 0 ] || echo "$prog: $out cannot be locked here (flock exit $held): not locked" >&2
            PREPARE_LOCK_HELD=1
        else
            echo "$prog: $out/.lock cannot be written: not locked" >&2
        fi
    fi
    if [ -f "$out/settings" ] && [ "$(cat "$out/settings")" != "$1" ]; then
        local finished
        finished=$(cd "$out" && ls -A | grep -v -e '^settings$' -e '^\.lock$' -e '\.partial$' || true)
        [ -z "$finished" ] \
            || die "$out was prepared with different settings ($(cat "$out/settings")); remove it or pass another --out"
        # e.g. held-out sets too large for the corpus, retried with smaller ones
        echo "$prog: $out: an earlier attempt with other settings ($(cat "$out/settings")) finished no step: using these"
        rm -f "$out/settings"
    fi
    if [ ! -f "$out/settings" ]; then
        # atomic, so a concurrent run never reads a half-written file
        echo "$1" > "$out/settings.$$" && mv "$out/settings.$$" "$out/settings"
    fi
}

run_step() {
    local name=$1; shift
    if [ -d "$out/$name" ]; then echo "$prog: $name: done already, skipping"; return; fi
    partial="$out/$name.partial"
    rm -rf "$partial"; mkdir -p "$partial"
    local started=$SECONDS
    echo "$prog: $name ..."
    "$@"
    mv "$partial" "$out/$name"
    echo "$prog: $name done in $((SECONDS - started)) s"
}

# tokenise every split of both languages: tok_splits SRC TGT SPLIT...
tok_splits() {
    local src=$1 tgt=$2; shift 2
    local s l inputs outputs
    for l in "$src" "$tgt"; do
        inputs=(); outputs=()
        for s in "$@"; do inputs+=("$out/raw/$s.$l"); outputs+=("$partial/$s.$l"); done
        $PY -m fairseq_ctx.data.pretokenize --lang "$l" --workers "$WORKERS" \
            --input "${inputs[@]}" --output "${outputs[@]}"
    done
}

# fairseq-preprocess of $out/$1/{train,valid,test}: binarize PREFIX_DIR SRC TGT [extra args]
binarize() {
    local dir=$1 src=$2 tgt=$3; shift 3
    $FAIRSEQ_PREPROCESS --source-lang "$src" --target-lang "$tgt" \
        --trainpref "$out/$dir/train" --validpref "$out/$dir/valid" --testpref "$out/$dir/test" \
        --destdir "$partial" --workers "$WORKERS" "$@" > "$partial/preprocess.log" 2>&1 \
        || { cat "$partial/preprocess.log" >&2; return 1; }
}

# SentencePiece-encode splits of one language: spm_encode MODEL INDIR OUTDIR LANG SPLIT...
spm_encode() {
    local model=$1 indir=$2 outdir=$3 l=$4; shift 4
    local s inputs=() outputs=()
    for s in "$@"; do inputs+=("$indir/$s.$l"); outputs+=("$outdir/$s.$l"); done
    $PY -m fairseq_ctx.data.sentencepiece_model encode --model "$model" --workers "$WORKERS" --input "${inputs[@]}" --output "${outputs[@]}"
}

# subword-nmt's BPE applied on $WORKERS cores (fairseq_ctx.data.bpe: byte-identical to
# subword-nmt apply-bpe on one core, whose CLI ignores --num-workers): apply_bpe CODES IN OUT
apply_bpe() {
    local started=$SECONDS
    $PY -m fairseq_ctx.data.bpe apply --codes "$1" --workers "$WORKERS" --input "$2" --output "$3"
    echo "$prog: apply-bpe $(basename "$2"): $((SECONDS - started)) s" >&2
}

# subword-nmt BPE learned on $out/tok/train.LANG for each language separately and applied
# to $out/tok/SPLIT.LANG: bpe_separate MERGES SRC TGT SPLIT...
bpe_separate() {
    local merges=$1 src=$2 tgt=$3; shift 3
    local s l
    for l in "$src" "$tgt"; do
        $PY -m fairseq_ctx.data.bpe learn --symbols "$merges" --workers "$WORKERS" --input "$out/tok/train.$l" \
            --output "$partial/codes.$l"
        for s in "$@"; do apply_bpe "$partial/codes.$l" "$out/tok/$s.$l" "$partial/$s.$l"; done
    done
}
