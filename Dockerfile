# The job image: NVIDIA's NGC PyTorch container (CUDA, cuDNN, NCCL, a CUDA build of torch, Transformer Engine, Apex,
# Nsight Systems) plus this project's job requirements and code. Build it and turn it into an enroot image:
#
#   docker build -t nemo-launcher-jobs:latest .
#   enroot import -o /lustre/images/nemo-launcher-jobs.sqsh dockerd://nemo-launcher-jobs:latest
#   python3 main.py ... container=/lustre/images/nemo-launcher-jobs.sqsh
#
# The requirement pins live in requirements-launch.txt, requirements-jobs.txt and requirements-nodeps.txt only; this
# file installs from them (tests/test_container_image.py holds it to that). One line of requirements-jobs.txt is left to
# the base image: torch, whose CUDA build there is the one Transformer Engine and Apex were compiled against.
# requirements-nodeps.txt goes in with --no-deps, as everywhere: its packages declare dependencies the jobs never use.
ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:25.09-py3
FROM ${BASE_IMAGE}

WORKDIR /opt/nemo-launcher
COPY requirements-launch.txt requirements-jobs.txt requirements.txt requirements-nodeps.txt ./
# The container's torch is pinned while the rest resolves, so no requirement can swap in a build without TE's ABI.
RUN python3 -c "import torch; print('torch==' + torch.__version__)" > /tmp/base-constraints.txt \
 && grep -v -E '^torch==' requirements-jobs.txt > /tmp/requirements-jobs.txt \
 && sed -e 's|^-r requirements-launch.txt|-r /opt/nemo-launcher/requirements-launch.txt|' \
        -e 's|^-r requirements-jobs.txt|-r /tmp/requirements-jobs.txt|' requirements.txt > /tmp/job-requirements.txt \
 && pip install --no-cache-dir -c /tmp/base-constraints.txt -r /tmp/job-requirements.txt \
 && pip install --no-cache-dir --no-deps -r requirements-nodeps.txt \
 && python3 -c "import megatron.core, transformer_engine.pytorch, pytorch_lightning" \
 && rm /tmp/base-constraints.txt /tmp/job-requirements.txt /tmp/requirements-jobs.txt

# The code, for platforms where jobs run what the image holds (BCP: launcher_scripts_path=/opt/nemo-launcher).
# On Slurm the launcher mounts its own checkout at launcher_scripts_path and puts it first on PYTHONPATH instead.
COPY main.py README.md ./
COPY conf ./conf
COPY nemo_launcher ./nemo_launcher
COPY corpora ./corpora
COPY deployment ./deployment
ENV PYTHONPATH=/opt/nemo-launcher
