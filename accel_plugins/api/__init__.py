"""Generated kubelet API stubs; regenerate with hack/gen-protos. loader.py,
written by hand, builds their classes on protobuf's upb extension."""
