"""How much of an IMDB review's label its last 20 tokens carry: a logistic regression on the
unigrams of the last 20 tokens of each review against one on the whole review (train 25,000,
test 25,000; tokens lowercased, <br /> removed). The VA-W row of implicit-ngrams Table 3 reads
its context at the final position, the sum of the last 20 positions' vectors, so it sees what
the first classifier sees.

    python results/notes/imdb-window-check.py [DATA_DIR]      (default ../shared/data)

Printed on the 2-core CPU these records come from:
    tokens per review: mean 269, median 201
    logistic regression on unigrams of the last 20 tokens: test accuracy 75.30
    logistic regression on unigrams of the whole review: test accuracy 87.52
"""
import gzip
import json
import re
import statistics
import sys
from pathlib import Path

from sklearn.feature_extraction.text import CountVectorizer
from sklearn.linear_model import LogisticRegression


def load(data: Path, split: str):
    rows = [json.loads(line) for line in gzip.open(data / "imdb" / f"{split}.jsonl.gz", "rt")]
    tokens = [re.findall(r"[a-z0-9']+|[^\sa-z0-9']", r["text"].replace("<br />", " ").lower()) for r in rows]
    return tokens, [r["label"] for r in rows]


def main() -> None:
    data = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data")
    train, y_train = load(data, "train")
    test, y_test = load(data, "test")
    print("tokens per review: mean %.0f, median %.0f" % (statistics.mean(map(len, train)),
                                                        statistics.median(map(len, train))))
    for name, cut in (("last 20 tokens", lambda t: t[-20:]), ("whole review", lambda t: t)):
        vec = CountVectorizer(analyzer=lambda t: t, min_df=2, binary=True)
        X_train = vec.fit_transform([cut(t) for t in train])
        X_test = vec.transform([cut(t) for t in test])
        model = LogisticRegression(max_iter=2000, C=0.5).fit(X_train, y_train)
        print(f"logistic regression on unigrams of the {name}: test accuracy {model.score(X_test, y_test) * 100:.2f}")


if __name__ == "__main__":
    main()
