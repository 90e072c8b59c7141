"""The benchmarks' one synthetic world: deterministic generators of what a platform team runs
(nodes over zones and GPU pools, training jobs, Deployments, Services, NetworkPolicies and Cilium
policies), shared by gen_repo.py (a Git repository), bench_cluster.py (a live API server),
bench_reachability.py and nca_baseline.py (namespaces, pods and policies), plus `growth` for the
1×/2×/4× exponent every benchmark prints; and the fleet benchmark's surroundings (the local GitHub,
signed webhooks, the service under uvicorn, redis-server and worker processes, a PostgreSQL schema),
which the tests import from here too.

Benchmarks import it as `world` (they run as scripts from benchmarks/, which puts this directory on
sys.path); it imports nothing from tests/ and no private name of the product.
"""
