"""Real HTTP stores for the shader cache's tests, started on 127.0.0.1 at a free port and stopped by
pid: moto's S3-compatible server (PyPI ``moto[server]``) and a WebDAV server (PyPI ``wsgidav`` on
cheroot) serving a folder, with basic authentication. Both come with the test extra."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from _redis import free_port
from _support import end


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.3):
            return True
    except OSError:
        return False


class _Server:
    name = "server"

    def __init__(self, folder: Path):
        self.folder = folder
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def argv(self) -> list[str]:
        raise NotImplementedError

    def start(self):
        self.folder.mkdir(parents=True, exist_ok=True)
        log = open(self.folder / f"{self.name}.log", "wb")
        self.proc = subprocess.Popen(self.argv(), cwd=self.folder, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 60
        while not _answers(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"{self.name} did not start: "
                                     f"{(self.folder / f'{self.name}.log').read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)
        return self

    def stop(self) -> None:
        end(self.proc)
        self.proc = None


class MotoS3(_Server):
    """moto's server: any access key is accepted (signatures are checked against botocore's
    signer in the tests instead)."""

    name = "moto"
    key_id, secret = "AKIATESTONEBIT", "test-secret-onebit"

    def argv(self) -> list[str]:
        return [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(self.port)]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=self.key_id, aws_secret_access_key=self.secret)

    def env(self, bucket: str, prefix: str = "") -> dict[str, str]:
        """What a user sets for sccache's S3 backend on this server."""
        return {"SCCACHE_BUCKET": bucket, "SCCACHE_ENDPOINT": self.endpoint, "SCCACHE_REGION": "us-east-1",
                "SCCACHE_S3_KEY_PREFIX": prefix, "AWS_ACCESS_KEY_ID": self.key_id,
                "AWS_SECRET_ACCESS_KEY": self.secret}


class WebDav(_Server):
    """wsgidav serving ``folder/share`` at ``/``, for one user with a password."""

    name = "wsgidav"
    user, password = "builder", "dav-pass-onebit"

    @property
    def share(self) -> Path:
        return self.folder / "share"

    def argv(self) -> list[str]:
        self.share.mkdir(parents=True, exist_ok=True)
        conf = {"host": "127.0.0.1", "port": self.port, "provider_mapping": {"/": str(self.share)},
                "http_authenticator": {"accept_basic": True, "accept_digest": False, "default_to_digest": False},
                "simple_dc": {"user_mapping": {"*": {self.user: {"password": self.password}}}},
                "verbose": 1, "logging": {"enable_loggers": []}}
        (self.folder / "wsgidav.json").write_text(json.dumps(conf))
        return [str(Path(sys.executable).with_name("wsgidav")), "--config", str(self.folder / "wsgidav.json")]

    def env(self, prefix: str = "") -> dict[str, str]:
        return {"SCCACHE_WEBDAV_ENDPOINT": f"http://127.0.0.1:{self.port}/", "SCCACHE_WEBDAV_KEY_PREFIX": prefix,
                "SCCACHE_WEBDAV_USERNAME": self.user, "SCCACHE_WEBDAV_PASSWORD": self.password}
