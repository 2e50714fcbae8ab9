// Package helm holds the tests of the Helm chart in xpu-timer/: `helm lint`
// and `helm template` through Helm's Go packages (helm.sh/helm/v3), every
// rendered object decoded strictly into its Kubernetes or prometheus-operator
// type, and the plain manifests of deploy/kubernetes checked against the
// chart. Helm's dependencies are large: they are pinned in deploy/go.mod, a
// module of its own, and stay out of the product's go.mod.
package helm
