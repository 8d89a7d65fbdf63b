package inject

import (
	"flag"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sluice-rl/sluice/internal/settings"
)

// What the injector derives rather than copies: secrets as references to
// a Secret, never as values in the pod spec (anyone who can read the
// Deployment can read its spec), and the sidecar's memory settings from
// its container's memory limit, so that a sidecar given the defaults fits
// the container it is given.

// defaultTokenSecretKey is the key of the HTTP check's token in
// --http-token-secret.
const defaultTokenSecretKey = "http-token"

// registerSecrets adds the flags that name Secrets, beside
// --upstream-secret.
func (s *Settings) registerSecrets(fs *flag.FlagSet) {
	fs.StringVar(&s.TokenSecret, "http-token-secret", s.TokenSecret,
		"`name` of the Secret whose key --http-token-secret-key holds the HTTP check's bearer token (SLUICE_HTTP_TOKEN); empty: none")
	fs.StringVar(&s.TokenSecretKey, "http-token-secret-key", s.TokenSecretKey, "`key` of the token in --http-token-secret")
}

// httpTokenRefused is why --http-token and sluice.io/http-token are
// refused: the way out, in one line.
const httpTokenRefused = "the token would be written into the pod spec: put it in a Secret and give --http-token-secret NAME " +
	"(annotation sluice.io/http-token-secret; its key --http-token-secret-key, default " + defaultTokenSecretKey + ")"

// checkDerived refuses secrets given as values and a memory limit too
// small to size, and checks c, the sidecar's configuration, as it will
// run: with the token the Secret will provide.
func (s *Settings) checkDerived(c settings.Config) error {
	if _, _, err := s.sizing(); err != nil {
		return err
	}
	if s.Sidecar.HTTPToken != "" {
		return fmt.Errorf("invalid --http-token: %s", httpTokenRefused)
	}
	if s.TokenSecret != "" {
		if s.TokenSecretKey == "" {
			return fmt.Errorf("invalid --http-token-secret-key: empty")
		}
		c.HTTPToken = "from the Secret" // stands in for validation only: never rendered
	}
	return c.Validate()
}

// secretEnv is the environment that brings the Secrets' values in.
func (s *Settings) secretEnv() []corev1.EnvVar {
	ref := func(name, secret, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: settings.EnvName(name), ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}}
	}
	var env []corev1.EnvVar
	if s.UpstreamSecret != "" {
		env = append(env, ref("upstream", s.UpstreamSecret, s.UpstreamSecretKey))
	}
	if s.TokenSecret != "" {
		env = append(env, ref("http-token", s.TokenSecret, s.TokenSecretKey))
	}
	return env
}

// The memory arithmetic (deploy/README.md, "Memory sizing"). Of the
// container's memory limit L, Go may use goMemLimitShare (GOMEMLIMIT), the
// rest being what the collector cannot account for (the binary, thread
// stacks outside Go's heap). Of GOMEMLIMIT, baseMemory is the idle process
// (measured at 25 MiB RSS with the in-memory store empty); what is left is
// halved between the in-memory store's keys, at bytesPerKey each, and the
// input that clients may buffer, which peaks at inputOverhead times
// --max-input-memory (a buffer grows by doubling, and a frame being parsed
// is held once as read and once as arguments).
const (
	goMemLimitShare = 0.85
	baseMemory      = 32 << 20
	// bytesPerKey is a key's share of the in-memory store's heap with keys
	// of up to keyBytes bytes (the policy's prefix and the client's key),
	// measured by TestMemoryPerKey for every algorithm whose state has a
	// fixed size (all but the sliding log, which keeps 8 bytes per request
	// in its period): at most 430 bytes, rounded up for the collector's
	// spans and the index's growth.
	bytesPerKey   = 512
	keyBytes      = 128
	inputOverhead = 1.5
	// minMemoryLimit leaves the keys and the input 8 MiB in all.
	minMemoryLimit = 48 << 20
)

// Sizing is what a memory limit gives the sidecar.
type Sizing struct {
	GoMemLimit     int64 // bytes, for GOMEMLIMIT
	MaxKeys        int
	MaxInputMemory int64 // bytes
}

// sizeFor derives the sidecar's memory settings from its container's
// memory limit, in bytes.
func sizeFor(limit int64) (Sizing, error) {
	if limit < minMemoryLimit {
		return Sizing{}, fmt.Errorf("invalid --memory-limit: %d MiB is too small: the sidecar needs at least %d MiB", limit>>20, minMemoryLimit>>20)
	}
	goLimit := int64(float64(limit)*goMemLimitShare) &^ (1<<20 - 1) // whole MiB
	half := (goLimit - baseMemory) / 2
	return Sizing{
		GoMemLimit:     goLimit,
		MaxKeys:        int(half / bytesPerKey),
		MaxInputMemory: int64(float64(half)/inputOverhead) &^ (1<<20 - 1),
	}, nil
}

// sizeMemory sets c's --max-keys and --max-input-memory from the memory
// limit where c has the binary's defaults: a value given (flag or
// annotation) is kept.
func (s *Settings) sizeMemory(c *settings.Config) error {
	sz, ok, err := s.sizing()
	if err != nil || !ok {
		return err
	}
	d := settings.Default()
	fs := flag.NewFlagSet("sizing", flag.ContinueOnError)
	c.Register(fs)
	def := flag.NewFlagSet("defaults", flag.ContinueOnError)
	d.Register(def)
	for name, v := range map[string]string{
		"max-keys":         strconv.Itoa(sz.MaxKeys),
		"max-input-memory": strconv.FormatInt(sz.MaxInputMemory>>20, 10) + "mb",
	} {
		if fs.Lookup(name).Value.String() != def.Lookup(name).DefValue {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("sizing --%s to %s: %w", name, v, err)
		}
	}
	return nil
}

// sizing is the Sizing of s's memory limit; false when there is none.
func (s *Settings) sizing() (Sizing, bool, error) {
	if s.MemoryLimit == "" {
		return Sizing{}, false, nil
	}
	q, err := resource.ParseQuantity(s.MemoryLimit)
	if err != nil {
		return Sizing{}, false, fmt.Errorf("invalid --memory-limit %q: %v", s.MemoryLimit, err)
	}
	sz, err := sizeFor(q.Value())
	return sz, err == nil, err
}

// memoryEnv is GOMEMLIMIT for the memory limit, so that the collector
// works harder before the container is OOM-killed.
func (s *Settings) memoryEnv() []corev1.EnvVar {
	sz, ok, _ := s.sizing()
	if !ok {
		return nil
	}
	return []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: strconv.FormatInt(sz.GoMemLimit>>20, 10) + "MiB"}}
}
