// Package deploy holds Sluice's Kubernetes manifests and container image
// (sidecar/, webhook/) and, in its tests, their checks: every
// kustomization rendered with kustomize's own library and decoded strictly
// into the Kubernetes Go types, the rendered sidecar run as a process, and
// the image built and run from its own root filesystem.
//
// The sidecar components' sidecar.yaml files are the injector's rendering
// (package inject); regenerate them with
//
//	go generate ./deploy
package deploy

//go:generate go test -run TestComponentsAreGenerated -update .
