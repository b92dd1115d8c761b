"""Launch side: compose, validate, render and submit pipelines. Never imports torch or megatron."""
