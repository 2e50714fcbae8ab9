// Package helm holds the tests of the Helm chart in xpu-timer/: `helm lint`
// and `helm template` through Helm's Go packages (helm.sh/helm/v3, pinned in
// go.mod), every rendered object decoded strictly into its Kubernetes or
// prometheus-operator type, and the plain manifests of deploy/kubernetes
// checked against the chart. Helm's dependencies are large, so only this
// package imports them.
package helm
