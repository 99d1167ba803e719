"""Where a replay runs: arguments, then the environment, then the profile file; tokens only
from the environment and never shown (``restream_kit.config``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from restream_kit import config
from restream_kit.model.errors import RestreamError


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    for name in (
        "RESTREAM_MASTER",
        "RESTREAM_SPARK_MASTER",
        "RESTREAM_SPARK_CONF",
        "RESTREAM_CONNECT_TOKEN",
        "RESTREAM_PROFILE",
        "RESTREAM_EXECUTOR_WAIT",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RESTREAM_HOME", str(tmp_path / "home"))


def write_profile(tmp_path, text: str):
    path = tmp_path / "home" / "profile.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_nothing_configured_means_no_master_and_the_default_wait():
    target = config.resolve()
    assert target.master is None and target.conf == {}
    assert target.executor_wait == config.DEFAULT_EXECUTOR_WAIT


def test_arguments_beat_the_environment_which_beats_the_profile(tmp_path, monkeypatch):
    write_profile(
        tmp_path,
        'master = "spark://profile:7077"\nexecutor_wait = 12\n'
        '[conf]\n"spark.a" = "profile"\n"spark.b" = "profile"\n"spark.c" = 3\n',
    )
    assert config.resolve().master == "spark://profile:7077"
    assert config.resolve().conf == {"spark.a": "profile", "spark.b": "profile", "spark.c": "3"}
    assert config.resolve().executor_wait == 12
    monkeypatch.setenv("RESTREAM_MASTER", "spark://env:7077")
    monkeypatch.setenv("RESTREAM_SPARK_CONF", '{"spark.a": "env", "spark.flag": true}')
    monkeypatch.setenv("RESTREAM_EXECUTOR_WAIT", "5")
    target = config.resolve()
    assert target.master == "spark://env:7077" and target.sources["master"] == "environment"
    assert target.conf == {
        "spark.a": "env",
        "spark.b": "profile",
        "spark.c": "3",
        "spark.flag": "true",
    }
    assert target.executor_wait == 5
    target = config.resolve("local[2]", {"spark.b": "arg"}, 1.5)
    assert target.master == "local[2]" and target.sources["master"] == "argument"
    assert target.conf["spark.a"] == "env" and target.conf["spark.b"] == "arg"
    assert target.executor_wait == 1.5


def test_the_old_master_variable_still_counts(monkeypatch):
    monkeypatch.setenv("RESTREAM_SPARK_MASTER", "local[3]")
    assert config.resolve().master == "local[3]"


def test_spark_conf_from_key_value_pairs_or_json():
    assert config.parse_conf("a.b=1, c.d = x=y ,") == {"a.b": "1", "c.d": "x=y"}
    assert config.parse_conf('{"a": 1, "b": false}') == {"a": "1", "b": "false"}
    assert config.parse_conf("  ") == {}
    with pytest.raises(RestreamError, match=r"RESTREAM_SPARK_CONF: 'oops' is not key=value"):
        config.parse_conf("a=1,oops")
    with pytest.raises(RestreamError, match="RESTREAM_SPARK_CONF: not valid JSON"):
        config.parse_conf('{"a": ')


def test_profile_path_choices(tmp_path, monkeypatch):
    assert config.profile_path() == tmp_path / "home" / "profile.toml"
    monkeypatch.setenv("RESTREAM_PROFILE", str(tmp_path / "elsewhere.toml"))
    assert config.profile_path() == tmp_path / "elsewhere.toml"
    monkeypatch.delenv("RESTREAM_PROFILE")
    monkeypatch.delenv("RESTREAM_HOME")
    assert config.profile_path().parts[-2:] == (".restream", "profile.toml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("master = ", "not a valid TOML profile"),
        ('mastr = "local"', "unknown profile key 'mastr'"),
        ('conf = "x"', r"\[conf\] must be a table"),
        ("executor_wait = -1", "must be more than 0 seconds"),
    ],
)
def test_bad_profiles_name_the_file(tmp_path, text, message):
    path = write_profile(tmp_path, text)
    with pytest.raises(RestreamError, match=message) as info:
        config.resolve()
    assert str(path) in str(info.value)


def test_a_connect_token_comes_only_from_the_environment(tmp_path, monkeypatch):
    assert config.resolve("sc://h:15002").master == "sc://h:15002"
    monkeypatch.setenv("RESTREAM_CONNECT_TOKEN", "s3cret")
    target = config.resolve("sc://h:15002")
    assert target.master == "sc://h:15002/;token=s3cret"
    assert target.shown_master == "sc://h:15002/;token=***"
    assert "s3cret" not in repr(target.shown_master)
    assert config.resolve("sc://h:1/;use_ssl=true").master == "sc://h:1/;use_ssl=true;token=s3cret"
    # Classic masters never carry it.
    assert config.resolve("spark://h:7077").master == "spark://h:7077"
    with pytest.raises(RestreamError, match="RESTREAM_CONNECT_TOKEN") as info:
        config.resolve("sc://h:1/;token=leaked")
    assert "leaked" not in str(info.value)
    write_profile(tmp_path, 'master = "sc://h:1/;token=leaked"\n')
    with pytest.raises(RestreamError, match="profile.toml: a Spark Connect token") as info:
        config.resolve()
    assert "leaked" not in str(info.value)


def test_redact_hides_every_token():
    assert config.redact("sc://a:1/;user_id=x;token=abc;use_ssl=true") == (
        "sc://a:1/;user_id=x;token=***;use_ssl=true"
    )
    assert config.redact("spark://a:1") == "spark://a:1"


def test_config_is_core_and_imports_no_spark():
    code = "import sys, restream_kit.config; sys.exit('pyspark' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_the_cli_takes_conf_and_rejects_a_bad_one(root):
    done = subprocess.run(
        [sys.executable, "-m", "restream_kit", "replay", "examples/antispam.py",
         "--log", "sample_data/social_small.parquet", "--engine", "spark", "--conf", "nothing"],
        cwd=root, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --conf 'nothing': expected KEY=VALUE"
