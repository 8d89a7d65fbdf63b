package helm

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-rl/sluice/deploy/internal/containertest"
)

var sluiceBin string

// TestMain builds the sluice binary once, in the main module (with its
// own go.mod, not this module's), as the image is built.
func TestMain(m *testing.M) {
	bin, cleanup, err := containertest.Build("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy/helm:", err)
		os.Exit(1)
	}
	sluiceBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// containerPort is the number of the container's port named name; 0 when
// it has none.
func containerPort(c corev1.Container, name string) int32 {
	n, err := strconv.ParseInt(containertest.ContainerPort(c, name), 10, 32)
	if err != nil {
		return 0
	}
	return int32(n)
}
