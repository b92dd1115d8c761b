"""The AutoConfigurator's launch side (torch-free): `python3 auto_configurator/main.py search_config=gpt3/5b`.

settings.py     search_config.train_settings read and checked (one line per bad value, exit 2)
sizing.py       model size from a compute budget, and days to train a size
base_config.py  the base training config of a size (`base_cfg_<size>b.yaml`), as conf/training/ holds them
grid.py         the candidate layouts the seed's rules allow (TP, PP, VP, CP, micro-batch, recomputation)
scoring.py      each candidate scored by the performance model; those predicted not to fit dropped
search_jobs.py  the best candidates as one job array plus the analysis job, through the launcher's backends
app.py          the whole run, and its summary
"""
