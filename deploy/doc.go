// Package deploy holds no code: it is the home of the deployment files
// (Prometheus alert rules, the Grafana dashboard, Kubernetes manifests) and
// of the tests that check them.
package deploy
