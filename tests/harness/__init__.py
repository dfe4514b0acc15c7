"""The test suite's support, apart from the tests: the cluster phase's lanes and timing,
`make test-changed`'s selection, the network guard, stand-ins (EC2's instance metadata),
the real sshd's testbed, faults injected into local clusters, and the plugin that runs
adaptdl's shipped tests under the kit's fixes."""
