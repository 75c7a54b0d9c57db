"""Telemetry: NVML sampling (measured GPU-s and DRAM bytes), per-request attribution, resource reports."""

from .attribution import Attributed, Attribution, Window, attribute, bucket_tokens
from .nvml import DeviceStatus, NvmlSampler
from .nvml_api import NvmlApi, PynvmlApi
from .resources import ResourceReport, RoleTokens, report_from_ledger, session_report

__all__ = [
    "Attributed",
    "Attribution",
    "DeviceStatus",
    "NvmlApi",
    "NvmlSampler",
    "PynvmlApi",
    "ResourceReport",
    "RoleTokens",
    "Window",
    "attribute",
    "bucket_tokens",
    "report_from_ledger",
    "session_report",
]
