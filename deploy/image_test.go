package deploy

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/deploy/internal/containertest"
	"github.com/sluice-rl/sluice/inject"
)

// ociManifest and ociConfig are the parts of the OCI image format read here.
type ociDescriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

type ociManifest struct {
	Config ociDescriptor   `json:"config"`
	Layers []ociDescriptor `json:"layers"`
}

type ociConfig struct {
	Config struct {
		User         string              `json:"User"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		Env          []string            `json:"Env"`
		Labels       map[string]string   `json:"Labels"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
	} `json:"config"`
}

// needImageTools is buildah and root (for buildah and chroot). CI has
// both (scripts/test installs buildah), and there a missing one is a
// failure; a developer's machine without them skips the image test.
func needImageTools(t *testing.T) {
	t.Helper()
	var missing []string
	if _, err := exec.LookPath("buildah"); err != nil {
		missing = append(missing, "buildah (apt-get install -y buildah, or run scripts/test)")
	}
	if _, err := exec.LookPath("chroot"); err != nil {
		missing = append(missing, "chroot")
	}
	if os.Geteuid() != 0 {
		missing = append(missing, "root (buildah's vfs storage and chroot need it)")
	}
	if len(missing) == 0 {
		return
	}
	msg := "the image test needs " + strings.Join(missing, ", ")
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg + "; skipped outside CI")
}

// The image, built by deploy/sidecar/build-image and read back from its
// OCI archive: the binary as entrypoint, a numeric non-root user, no
// shell, the labels; then its root filesystem unpacked and the binary run
// inside it with chroot, as that user, which proves it needs nothing the
// image lacks.
func TestImage(t *testing.T) {
	needImageTools(t)
	const version = "0.0.0-test+image"
	dir := t.TempDir()
	archive := filepath.Join(dir, "sluice.tar")
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "./sidecar/build-image", archive)
	build.Env = append(os.Environ(), "VERSION="+version)
	start := time.Now()
	out, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("build-image: %v\n%s", err, out)
	}
	t.Logf("build-image in %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(out)))

	blobs := readArchive(t, archive)
	var index struct {
		Manifests []ociDescriptor `json:"manifests"`
	}
	mustJSON(t, blobs["index.json"], &index)
	if len(index.Manifests) != 1 {
		t.Fatalf("index.json has %d manifests", len(index.Manifests))
	}
	var m ociManifest
	mustJSON(t, blob(t, blobs, index.Manifests[0].Digest), &m)
	var cfg ociConfig
	mustJSON(t, blob(t, blobs, m.Config.Digest), &cfg)
	c := cfg.Config
	if !slices.Equal(c.Entrypoint, []string{"/sluice"}) || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q, cmd %q; want [/sluice] alone", c.Entrypoint, c.Cmd)
	}
	if c.User != fmt.Sprintf("%d:%d", inject.User, inject.User) {
		t.Errorf("user %q; want %d:%d, numeric, so that runAsNonRoot can check it", c.User, inject.User, inject.User)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.source":   "https://github.com/sluice-rl/sluice",
		"org.opencontainers.image.title":    "sluice",
	} {
		if c.Labels[k] != want {
			t.Errorf("label %s = %q; want %q", k, c.Labels[k], want)
		}
	}
	if _, ok := c.ExposedPorts["9380/tcp"]; !ok {
		t.Errorf("exposed ports %v", c.ExposedPorts)
	}

	root := filepath.Join(dir, "rootfs")
	var files []string
	var total int64
	for i, l := range m.Layers {
		names := unpack(t, blob(t, blobs, l.Digest), l.MediaType, root)
		t.Logf("layer %d: %s %s, %d bytes compressed: %v", i, l.MediaType, l.Digest[:19], l.Size, names)
		files = append(files, names...)
		total += l.Size
	}
	fi, _ := os.Stat(archive)
	t.Logf("image: %d layers, %d bytes of layers, archive %d bytes", len(m.Layers), total, fi.Size())
	slices.Sort(files)
	if want := []string{"bin/ratelimit", "etc/ssl/certs/ca-certificates.crt", "sluice"}; !slices.Equal(files, want) {
		t.Errorf("files in the image %v; want only %v (no shell, nothing else)", files, want)
	}
	pem, err := os.ReadFile(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt"))
	if err != nil || !x509.NewCertPool().AppendCertsFromPEM(pem) || bytes.Count(pem, []byte("BEGIN CERTIFICATE")) < 50 {
		t.Errorf("the CA bundle is missing or not a bundle: %v", err)
	}
	checkStatic(t, filepath.Join(root, "sluice"))
	for _, f := range files {
		if st, err := os.Stat(filepath.Join(root, f)); err == nil {
			t.Logf("  /%s: %d bytes", f, st.Size())
		}
	}

	// The root of the unpacked image must be enterable by the image's user.
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	user := fmt.Sprintf("--userspec=%d:%d", inject.User, inject.User)
	v, err := exec.Command("chroot", user, root, "/sluice", "--version").CombinedOutput()
	t.Logf("chroot %s /sluice --version: %s", root, strings.TrimSpace(string(v)))
	if err != nil || strings.TrimSpace(string(v)) != "sluice "+version {
		t.Errorf("--version inside the image: %q, %v; want the stamped %q", v, err, version)
	}
	runInChroot(t, root, user)
	// /bin/ratelimit, envoyproxy/ratelimit's command, is Sluice taking the
	// peer's variables: one it does not offer stops it, named.
	peer := exec.Command("chroot", user, root, "/bin/ratelimit")
	peer.Env = []string{"REDIS_PERSECOND=true"}
	out, err = peer.CombinedOutput()
	if want := "ratelimit: REDIS_PERSECOND=true: "; !strings.HasPrefix(string(out), want) || peer.ProcessState.ExitCode() != 2 {
		t.Errorf("/bin/ratelimit inside the image: %q, %v; want exit 2 and %q...", out, err, want)
	}
}

// runInChroot serves from inside the unpacked image and answers PING.
func runInChroot(t *testing.T, root, user string) {
	t.Helper()
	port, admin := containertest.FreePort(t), containertest.FreePort(t)
	cmd := exec.Command("chroot", user, root, "/sluice", "--listen=127.0.0.1:"+port, "--admin-listen=127.0.0.1:"+admin)
	cmd.Env = []string{} // a container's environment: nothing the image does not set
	p := containertest.Start(t, cmd)
	conn := p.Listening(t, "127.0.0.1:"+port)
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = conn.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	line, err := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	t.Logf("inside the image, PING answered %q", line)
	if err != nil || line != "+PONG\r\n" {
		t.Errorf("PING: %q, %v", line, err)
	}
	if resp, err := http.Get("http://127.0.0.1:" + admin + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Errorf("/healthz inside the image: %v", err)
	} else {
		resp.Body.Close()
	}
	p.Stop(t)
	t.Logf("its log:\n%s", p.Out.String())
}

// checkStatic fails unless the binary is a static executable: no program
// interpreter (dynamic loader), which an empty image could not supply.
func checkStatic(t *testing.T, file string) {
	t.Helper()
	f, err := elf.Open(file)
	if err != nil {
		t.Fatalf("the binary: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary is dynamically linked")
		}
	}
}

// readArchive is every regular file of the OCI archive, by path.
func readArchive(t *testing.T, file string) map[string][]byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("the OCI archive: %v", err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[path.Clean(h.Name)] = b
		}
	}
}

func blob(t *testing.T, blobs map[string][]byte, digest string) []byte {
	t.Helper()
	algo, hex, _ := strings.Cut(digest, ":")
	b, ok := blobs["blobs/"+algo+"/"+hex]
	if !ok {
		t.Fatalf("the archive has no blob %s", digest)
	}
	return b
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}

// unpack extracts a layer into root and returns the regular files and
// links it holds.
func unpack(t *testing.T, layer []byte, mediaType, root string) []string {
	t.Helper()
	var r io.Reader = bytes.NewReader(layer)
	if strings.HasSuffix(mediaType, "+gzip") {
		gz, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		r = gz
	}
	var names []string
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatalf("layer: %v", err)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "/"))
		if name == "." || strings.HasPrefix(name, "../") {
			continue
		}
		target := filepath.Join(root, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode).Perm())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
			names = append(names, name)
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(h.Linkname, target); err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
		default: // a hard link (a shell is often one) is recorded, not followed
			names = append(names, name)
		}
	}
}
