"""``accel-plugins dra-conformance``: hold any vendor's DRA driver to the kubelet's contract.

The kit plays the kubelet and the scheduler for one node. It finds the driver
through plugin-watcher registration, reads the driver's ResourceSlices from a
real API server, creates ResourceClaims there and allocates them from those
slices, then calls NodePrepareResources and NodeUnprepareResources over the
driver's socket as the kubelet would. It talks to sockets, files and the API
server only, so the driver may be written in any language; given a command
instead of a running driver, it also restarts the driver and simulates a reboot.

The checks are a catalogue (:mod:`.catalogue`): each names its rule, where the
rule is written, and whether it is required or recommended. May import the
kubelet emulator, ``kube/`` (the API client), ``util/`` and ``api/``; never the
framework, the modes or a backend (the kit must not agree with our driver by
sharing its code).
"""
