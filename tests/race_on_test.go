//go:build race

package tests

// raceBuild: the test binary runs with the race detector, so the sluice
// binary is built with it too, and a race in the real server fails the
// test that met it (the binary exits 66).
const raceBuild = true
