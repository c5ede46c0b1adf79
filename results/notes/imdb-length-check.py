"""How many IMDB reviews have at most 437 tokens under rnnlens's tokenizer (lowercased,
<br /> removed): the implicit-ngrams paper's Table 6 gives IMDB 17,212 / 4,304 / 4,363
train / dev / test reviews of at most 437 tokens, a subset it does not describe.

    python results/notes/imdb-length-check.py [DATA_DIR]      (default ../shared/data)

Printed on the 2-core CPU these records come from:
    train: 25,000 reviews, 21,381 of at most 437 tokens (mean length 266.3)
    test: 25,000 reviews, 21,586 of at most 437 tokens (mean length 260.5)
    the paper's train + dev: 21,516
"""
import sys
from pathlib import Path

from rnnlens.data.readers import read_imdb

CAP = 437


def main(data_dir: str = "../shared/data") -> None:
    for split in ("train", "test"):
        lengths = [len(tokens) for tokens, _ in read_imdb(Path(data_dir) / "imdb" / f"{split}.jsonl.gz")]
        short = sum(n <= CAP for n in lengths)
        print(f"{split}: {len(lengths):,} reviews, {short:,} of at most {CAP} tokens "
              f"(mean length {sum(lengths) / len(lengths):.1f})")
    print(f"the paper's train + dev: {17212 + 4304:,}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
