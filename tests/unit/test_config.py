import pytest

from pvfs import config as cfgmod
from pvfs.layout.stripe import Stripe


def test_dump_parse_round_trip(tmp_path):
    from pvfs.cluster.launch import make_config, write_config

    cfg = make_config(str(tmp_path), iods=3, stripe=Stripe(1, 2, 8192))
    again = write_config(cfg, str(tmp_path / "pvfs.toml"))
    assert again.iods == cfg.iods and again.manager == cfg.manager
    assert again.stripe == Stripe(1, 2, 8192) and again.niods == 3
    assert again.gather == cfgmod.GATHER_S


def test_opt4_gather_round_trips(tmp_path):
    from dataclasses import replace

    from pvfs.cluster.launch import make_config, write_config

    cfg = replace(make_config(str(tmp_path), iods=2), gather=0.0)
    assert write_config(cfg, str(tmp_path / "pvfs.toml")).gather == 0.0


def test_the_managers_size_cache_can_be_sized_or_switched_off(tmp_path):
    from dataclasses import replace

    from pvfs.cluster.launch import make_config, write_config

    cfg = make_config(str(tmp_path), iods=2)
    assert cfg.size_cache == cfgmod.SIZE_CACHE > 0
    off = write_config(replace(cfg, size_cache=0), str(tmp_path / "pvfs.toml"))
    assert off.size_cache == 0


@pytest.mark.parametrize("text,msg", [
    ("", "[manager]"),
    ('[manager]\naddress="h:1"\ndata_dir="m"\n', "[[iod]]"),
    ('[manager]\naddress="nope"\ndata_dir="m"\n[[iod]]\naddress="h:2"\ndata_dir="i"\n', "host:port"),
    ('[manager]\naddress="h:1"\ndata_dir="m"\n[[iod]]\naddress="h:1"\ndata_dir="i"\n', "twice"),
    (('[manager]\naddress="h:1"\ndata_dir="m"\n[[iod]]\naddress="h:2"\ndata_dir="i"\n'
      '[stripe]\npcount=3\n'), "pcount"),
    (('[manager]\naddress="h:1"\ndata_dir="m"\n[[iod]]\naddress="h:2"\ndata_dir="i"\n'
      '[scheduler]\nalgorithm="fifo"\n'), "algorithm"),
    (('[manager]\naddress="h:1"\ndata_dir="m"\n[[iod]]\naddress="h:2"\ndata_dir="i"\n'
      '[scheduler]\ngather=11\n'), "gather"),
    (('[manager]\naddress="h:1"\ndata_dir="m"\n[[iod]]\naddress="h:2"\ndata_dir="i"\n'
      '[scheduler]\ngather=-0.5\n'), "gather"),
    (('[manager]\naddress="h:1"\ndata_dir="m"\nsize_cache=-1\n[[iod]]\naddress="h:2"\n'
      'data_dir="i"\n'), "size_cache"),
    ("not toml [", "not valid TOML"),
])
def test_bad_configs_say_why(tmp_path, text, msg):
    p = tmp_path / "c.toml"
    p.write_text(text)
    with pytest.raises(cfgmod.ConfigError, match=msg.replace("[", r"\[").replace("]", r"\]")):
        cfgmod.load(p)


def test_missing_file(tmp_path):
    with pytest.raises(cfgmod.ConfigError, match="does not exist"):
        cfgmod.load(tmp_path / "none.toml")
