#!/usr/bin/env bash
# The TLS certificates of the fleet's tests (compat_tests/data/tls/): dask.pem, one self-signed certificate, its own
# CA, that a test's scheduler, workers and client all present, as Dask's Security.temporary() makes one (which
# needs the cryptography package, not a dependency here); other.pem, a stranger's, which that CA did not sign.
# For tests only: their keys are public.
set -euo pipefail
cd "$(dirname "$0")/../compat_tests/data/tls"
for name in dask other; do
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.pem" -days 36500 \
        -subj "/CN=$name" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
        -addext "basicConstraints=critical,CA:TRUE" 2>/dev/null
done
