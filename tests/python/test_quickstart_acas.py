"""The seed's Quickstart in Python against a real acas-emulator (started by with_emulator.sh): the
config, AcasSandboxBackend, a router, one command, a file in and out, the conversation disposed."""

import asyncio
import os

from maf_sandbox import (AcasSandboxBackend, AcasSandboxConfig, Isolation, SandboxKey,
                         SandboxRouter, SandboxSpec)


def test_the_quickstart_runs_against_the_emulator():
    async def main():
        backend = AcasSandboxBackend(AcasSandboxConfig(
            endpoint=os.environ["MAF_TEST_ACAS_ENDPOINT"],
            subscription_id="00000000-0000-0000-0000-000000000000",
            resource_group="my-rg",
            sandbox_group="my-sandbox-group",
            registry="myregistry.azurecr.io",
            ca_file=os.environ["MAF_TEST_ACAS_CA_FILE"],
            token=os.environ["MAF_TEST_ACAS_TOKEN"],
            silence_preview_warning=True))
        await backend.discover()  # an emulator names its real rung; the floor stays honest
        assert backend.isolation is not Isolation.MICROVM
        router = SandboxRouter([backend], min_isolation=backend.isolation)
        key = SandboxKey("my-app", "conversation-1", "agent-a")
        try:
            sandbox = await router.acquire(key, SandboxSpec("quickstart", image="host"))
            result = await sandbox.exec(["sh", "-c", "echo hello from $(hostname)"])
            assert result.exit_code == 0
            assert result.stdout.startswith("hello from ")

            await sandbox.write_file("notes/in.txt", "grüße\n")
            assert await sandbox.read_file("notes/in.txt") == "grüße\n".encode("utf-8")
        finally:
            purge = await router.dispose_scope(key.scope, key.thread_id)
            # Its HTTPS connections live on the core's loop: close before the program ends.
            await backend.aclose()
        assert purge.disposed == 1 and purge.undisposed is None

    asyncio.run(main())
