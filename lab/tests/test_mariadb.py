"""The private MariaDB server's configuration: what the lab sets beside what a stack asks."""
from tarn_lab.mariadb import PrivateMariaDB


def test_every_mariadb_server_keeps_a_free_list_sized_to_its_buffer_pool(tmp_path):
    # MariaDB's default (1536 pages, 24 MiB) would leave 19% of a 128 MiB pool empty; the
    # lab keeps 1/64 of the pool's pages free, within MariaDB's minimum and its default.
    def config(settings):
        lines = PrivateMariaDB(tmp_path / "d", tmp_path / "r", settings).config_text().splitlines()
        return dict(line.split("=", 1) for line in lines if "=" in line)

    assert config({"innodb_buffer_pool_size": "128M"})["innodb_lru_scan_depth"] == "128"
    assert config({"innodb_buffer_pool_size": "112M"})["innodb_lru_scan_depth"] == "112"
    assert config({"innodb_buffer_pool_size": "4G"})["innodb_lru_scan_depth"] == "1536"
    assert config({"innodb_buffer_pool_size": "16M"})["innodb_lru_scan_depth"] == "100"
    assert config({})["innodb_lru_scan_depth"] == "128"  # MariaDB's pool as the lab starts it
    # A scenario's own value wins.
    assert config({"innodb_buffer_pool_size": "128M", "innodb_lru_scan_depth": 1536})["innodb_lru_scan_depth"] == "1536"
