// Package deploy holds the tests of tokenlimit's deployment artefacts: the
// container image (scripts/image.sh, run with podman), the Helm chart
// (deploy/helm/tokenlimit, rendered with a pinned helm and decoded strictly
// into Kubernetes' API types), the Kubernetes, Istio and Envoy Gateway
// recipes (deploy/recipes) and the release build (scripts/release.sh).
//
// It is a module of its own so that the library at the root does not
// depend on k8s.io/api.
package deploy
