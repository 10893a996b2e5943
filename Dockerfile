# The image solci measures one commit in, and the image docker-compose.yml runs.
#
# The Docker executor builds it from `git archive` of the commit (tracked files only) with
#   --build-arg BASE_IMAGE=solci-deps:latest
# The base image already holds every dependency (docker/build_base_image.sh makes it: Debian bookworm,
# Python 3.11, a venv in /opt/venv with torch, triton, ...), so a commit costs one source copy. On a GPU host
# build the deps image with a CUDA torch (TORCH_SPEC=..., see docker/README.md) or pass any image with
# python3 and the dependencies as BASE_IMAGE.
ARG BASE_IMAGE=solci-deps:latest
FROM ${BASE_IMAGE}

WORKDIR /src
# Dependencies first, so this layer is cached until pyproject.toml changes. When the base image satisfies
# them (the usual case) pip installs nothing and needs no network.
COPY pyproject.toml /src/pyproject.toml
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install --no-cache-dir --quiet -r /tmp/requirements.txt \
    && mkdir -p /out /data

COPY . /src
ENV PYTHONPATH=/src \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    SOLCI_DB=/data/history.duckdb
CMD ["python", "-m", "ci.cli", "--help"]
