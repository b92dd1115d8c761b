"""The T5/mT5 prompt_learning program (prompt_tuning.py has the job; tuning/peft_methods.py the methods).

python3 -u -m nemo_launcher.jobs.t5.prompt_learning --config <job dir>/<run.name>_hydra.yaml
"""

import sys


def main(argv=None) -> int:
    from .prompt_tuning import run

    return run(argv, "prompt_learning")


if __name__ == "__main__":
    sys.exit(main())
