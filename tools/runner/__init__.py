"""The sandboxed runner: ``tools.runner.api.run(RunRequest) -> RunResult``."""
