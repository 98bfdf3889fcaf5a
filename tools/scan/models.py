"""Pydantic models for ``tools.scan.api`` (stable JSON schema: ``schema_version``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

SCHEMA_VERSION = 1
Category = Literal["auto", "review", "unsupported"]
Device = Literal["accelerator", "tpx"]


class Finding(BaseModel):
    rule_id: str
    rule_name: str
    file: str = Field(description="path relative to the scanned root, '/' separated")
    line: int = Field(description="1-based; for notebooks, the line inside the cell")
    col: int = Field(description="1-based column")
    end_line: int
    end_col: int
    cell: int | None = Field(default=None, description="0-based notebook cell index, None for .py files")
    snippet: str
    category: Category
    message: str
    rewrite: str | None = Field(default=None, description="proposed rewrite (auto) or nearest working option")
    reason: str | None = Field(default=None, description="why it is not rewritten automatically (review/unsupported)")
    blocks: list[str] = Field(description="target devices this idiom breaks when left in place")


class FileNote(BaseModel):
    file: str
    kind: Literal["parse_error", "skipped_binary", "skipped_size", "skipped_encoding", "skipped_notebook", "error"]
    message: str
    line: int | None = None


class ScanRequest(BaseModel):
    path: Path
    rules: list[str] | None = Field(default=None, description="rule ids to run (default: all)")
    max_file_bytes: int = Field(default=2_000_000, gt=0)
    jobs: int | None = Field(default=None, description="worker processes (default: all cores)")
    respect_gitignore: bool = True


class ScanSummary(BaseModel):
    files_scanned: int
    files_skipped: int
    files_prefiltered: int = Field(description="scanned files proven CUDA-free by the token pre-filter")
    lines: int
    findings: int
    by_category: dict[str, int]
    by_rule: dict[str, int]


class ScanReport(BaseModel):
    schema_version: int = SCHEMA_VERSION
    root: str
    findings: list[Finding]
    notes: list[FileNote]
    summary: ScanSummary


class RewriteRequest(BaseModel):
    path: Path
    device: Device = "accelerator"
    files: list[str] | None = Field(default=None, description="restrict to these files (relative to path)")
    lines: dict[str, list[int]] | None = Field(
        default=None, description="restrict to findings starting on these lines, per relative file")
    rules: list[str] | None = None
    max_file_bytes: int = Field(default=2_000_000, gt=0)
    jobs: int | None = None
    respect_gitignore: bool = True


class FileRewrite(BaseModel):
    file: str
    original: str
    rewritten: str
    applied_rules: list[str]
    diff: str


class RewriteResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    root: str
    device: Device
    files: list[FileRewrite] = Field(description="files whose text changed")
    applied_rules: list[str]
    review: list[Finding] = Field(description="review/unsupported findings left in the rewritten code")
    warnings: list[str]
    notes: list[FileNote]
    diff: str = Field(description="unified diff of all files, a/ b/ prefixes, accepted by `git apply`")
