"""The YAML config: schema, loading with line-numbered errors, and model routing."""

from dragoman.config.loader import DEFAULT_CONFIG, ConfigError, load_config, parse_config
from dragoman.config.routing import check_report, resolve, routing_table
from dragoman.config.schema import Config, ModelConfig, ModelRoute, ServerConfig

__all__ = [
    "DEFAULT_CONFIG",
    "Config",
    "ConfigError",
    "ModelConfig",
    "ModelRoute",
    "ServerConfig",
    "check_report",
    "load_config",
    "parse_config",
    "resolve",
    "routing_table",
]
