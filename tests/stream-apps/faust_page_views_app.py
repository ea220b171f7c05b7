#!/usr/bin/env python3
"""faust's page-view example (the README's "count page views" agent), unchanged except for
names and settings: run by `faust_page_views.py` as `python faust_page_views_app.py worker`.

Env: BOOTSTRAP=host:port, TOPIC_PREFIX, FAUST_DATADIR (the local RocksDB tables).
"""
import os

import faust

bootstrap = os.environ["BOOTSTRAP"]
prefix = os.environ["TOPIC_PREFIX"]

app = faust.App(
    f"{prefix}-page-views",
    broker=[f"kafka://{b}" for b in bootstrap.split(",")],
    store="rocksdb://",
    datadir=os.environ.get("FAUST_DATADIR", "faust-data"),
    topic_partitions=2,
)


class PageView(faust.Record):
    id: str
    user: str


page_view_topic = app.topic(f"{prefix}-page_views", value_type=PageView)

page_views = app.Table("page_views", default=int)


@app.agent(page_view_topic)
async def count_page_views(views):
    async for view in views.group_by(PageView.id):
        page_views[view.id] += 1



if __name__ == "__main__":
    app.main()
