// Package helm holds the tests of Sluice's Helm chart (sluice/) and of the
// monitoring files (../monitoring: the Grafana dashboard and the
// Prometheus alerts, copied into the chart's files/).
//
// It is a Go module of its own so that Helm's and Prometheus's
// dependencies stay out of the sidecar's build; it uses the main module
// through a replace directive. Its tests render the chart with Helm's
// library, lint it, decode every object strictly into its Kubernetes Go
// type, check that the webhook it deploys injects the sidecar `sluice
// inject` renders for the same settings, run the central deployment as
// the real binary on a real Redis, and check every Sluice series the
// dashboard and alerts query against what that binary exports.
//
// After changing deploy/monitoring, copy it into the chart with
//
//	go generate ./deploy/helm
package helm

//go:generate go test -run TestChartFilesAreTheMonitoringFiles -update .
