"""`rnnlens complete`: MSR sentence completion with a language model."""
from __future__ import annotations

from ..argtypes import COUNT, SIZE
from ..data.tokenize import shown
from ..errors import RnnlensError
from ..outfiles import json_text


def cmd_complete(args) -> int:
    """MSR sentence completion: score the five filled sentences of each question by total
    log-probability and pick the best (recurrent-memory paper, Section 6)."""
    from ..analysis.completion import complete_with_model, format_result
    from ..app.run import Run
    from ..data.msr import read_msr_completion

    if args.batch_size < 1:
        raise RnnlensError("--batch-size must be positive")
    run = Run.load(args.model)
    model, cfg, vocab = run.model, run.config, run.vocab
    if model.task != "lm":
        raise RnnlensError(f"sentence completion needs a language model; {args.model} is a {model.task!r} model")
    # the questions are raw English sentences ("... the cat."): punctuation is split off, as
    # the tokenised corpora (PTB, WikiText) wrote it, whatever the model's training text needed;
    # the case is folded as the model's was
    from ..data.tokenize import Tokenizer

    tokenizer = Tokenizer(lowercase=run.tokenizer.lowercase, split_punct=True)
    questions = read_msr_completion(args.questions, args.answers, tokenizer)
    res = complete_with_model(model, vocab, questions, batch_size=args.batch_size)
    memory = "none" if cfg.model.memory is None else (
        f"{cfg.model.memory}, {'bidirectional' if cfg.model.memory_bidirectional else 'unidirectional'}")
    if args.json:
        print(json_text({"model": str(args.model), "memory": memory, **res.to_dict(questions)}, indent=2))
        return 0
    print(f"model {args.model} (memory block: {memory}); {len(questions)} questions")
    print(shown(format_result(res, questions, show=args.show), keep="\n"))
    return 0


def add_parser(sub) -> None:
    cp = sub.add_parser("complete", help="MSR sentence completion with a language model: the candidate whose "
                        "filled sentence has the highest log-probability (recurrent-memory Section 6)")
    cp.add_argument("--model", required=True, help="checkpoint folder of a language model")
    cp.add_argument("--questions", required=True, help="testing_data.csv or Holmes.machine_format.questions.txt")
    cp.add_argument("--answers", help="test_answer.csv or Holmes.machine_format.answers.txt: prints accuracy")
    cp.add_argument("--show", type=COUNT, default=0, help="also list the first N questions' choices")
    cp.add_argument("--batch-size", type=SIZE, default=64)
    cp.add_argument("--json", action="store_true", help="machine-readable output, every question's choice")
    cp.set_defaults(func=cmd_complete)
