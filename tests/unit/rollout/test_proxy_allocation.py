"""ShardLoad: the shard each new rollout goes to, and each shard's live count, as the sharded proxy's front
and a run's ProxyHandle both keep them."""

from openforgerl.rollout.proxy.allocation import ShardLoad


def test_rollouts_spread_over_the_least_loaded_shards_and_each_finish_counts_once():
    load = ShardLoad(3)
    picked = [load.reserve() for _ in range(4)]
    assert picked == [0, 1, 2, 0] and load.live == [2, 1, 1]
    for i, shard in enumerate(picked):
        load.own(f"r{i}", shard)
    load.finish("r1")
    load.finish("r1")  # sent twice (a retried finish): counted once
    load.finish("unknown")
    assert load.live == [2, 0, 1] and load.owner("r1") == 1  # the owner stays known for the trajectory read
    assert load.pick() == 1


def test_a_failed_create_frees_its_reservation_and_ties_go_to_the_shard_that_created_fewer():
    load = ShardLoad(2)
    shard = load.reserve()
    load.cancel(shard)
    assert load.live == [0, 0] and load.created == [1, 0]
    assert load.pick() == 1 and load.owner("never-created") is None
