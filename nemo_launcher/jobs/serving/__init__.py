"""Serving wing: what every export to Triton shares. text.py answers text requests (a family's generator does the
decoding), triton_export.py writes a text model's repository and config.pbtxt pieces, triton_text_model.py is the
Python backend copied into a text model's repository, triton_backend.py the helpers every backend model uses."""
