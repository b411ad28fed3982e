"""Generated kubelet API stubs; regenerate with hack/gen-protos."""
