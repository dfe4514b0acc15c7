"""The kit's job library: shipped to every job `make submit` runs (the job's runtime_env
`py_modules`), so a job imports it without installing anything:

    from raykit import placement, profile

placement  where work runs: the node labels every kit cluster carries, and the selectors
           Ray Data and Ray Train take
profile    wraps a Ray Train loop's data iterator and steps; prints the summary, the
           diagnosis and the RESULT line that `make plan PROFILE=` reads

It imports only Ray and the standard library (and numpy): it runs on every node.
"""
