"""The GPT prompt_learning program (prompt_tuning.py has the methods and what they read and write).

python3 -u -m nemo_launcher.jobs.gpt.prompt_learning --config <job dir>/<run.name>_hydra.yaml
"""

import sys


def main(argv=None) -> int:
    from .prompt_tuning import run

    return run(argv, "prompt_learning")


if __name__ == "__main__":
    sys.exit(main())
