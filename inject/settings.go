// Package inject renders Sluice's sidecar container and adds it to pods:
// the one source of the sidecar's Kubernetes shape. `sluice inject` runs it
// over YAML files, the admission webhook (package webhook) over pods being
// created, and deploy/sidecar/base is its rendering, checked by a test.
//
// Injection is a list of JSON patch operations computed from the pod's
// metadata and spec, never a rewrite of the pod: fields this package's
// Kubernetes types do not know (a newer cluster's) pass through untouched,
// and the webhook's answer and `sluice inject`'s output are the same
// operations applied in two places.
package inject

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sluice-rl/sluice/internal/settings"
	"github.com/sluice-rl/sluice/internal/version"
)

// Names the injector gives to what it adds, and the annotations and label
// it reads.
const (
	ContainerName    = "sluice"
	policiesVolume   = "sluice-policies"
	SocketVolume     = "sluice-socket"
	PoliciesDir      = "/etc/sluice/policies"
	policiesKey      = "policies.yaml"
	AdminPortName    = "sluice-admin"
	annotationPrefix = "sluice.io/"
	// InjectKey is the label that opts a pod in ("true") and the label or
	// annotation that opts it out ("false").
	InjectKey = annotationPrefix + "inject"
	// StatusKey marks an injected pod, as Istio's sidecar.istio.io/status
	// does: a pod that has it is never injected again.
	StatusKey = annotationPrefix + "status"
	// User is the image's numeric user and group.
	User = 65532
	// socketPerm is a Unix socket's mode when the pod gives none: every
	// container of the pod runs as a user of its own choosing, and none
	// but the pod's containers mount the volume the socket is in.
	socketPerm = "666"
)

// DefaultImage is the image of this version of Sluice. A tag holds no '+',
// which a development version has.
var DefaultImage = "sluice-rl/sluice:" + imageTag(version.String())

// imageTag turns a version into a valid image tag.
func imageTag(v string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, v)
}

// Settings is everything that shapes an injected sidecar: the sidecar's
// own settings (settings.Config, the binary's settings table) and how the
// container around it is built.
type Settings struct {
	Sidecar           settings.Config
	Image             string
	Native            bool   // an init container with restartPolicy Always (Kubernetes 1.29+); false: a plain container
	UpstreamSecret    string // Secret holding the upstream address; empty: the in-memory store
	UpstreamSecretKey string
	TokenSecret       string // Secret holding the HTTP check's token; empty: none (inject.go)
	TokenSecretKey    string
	PoliciesConfigMap string // ConfigMap holding PoliciesKey, mounted at PoliciesDir; empty: no policies
	CPURequest        string // resource quantities; empty: none
	MemoryRequest     string
	CPULimit          string
	MemoryLimit       string
	PrometheusScrape  bool // add prometheus.io/* annotations to pods that have none
}

// DefaultSettings is what `sluice inject` and the webhook render with no
// flags: the binary's defaults, except that the admin port listens on
// every address, for the kubelet's probes and Prometheus.
func DefaultSettings() Settings {
	c := settings.Default()
	c.AdminListen = "0.0.0.0:9380"
	return Settings{
		Sidecar:           c,
		Image:             DefaultImage,
		Native:            true,
		UpstreamSecret:    "sluice-upstream",
		UpstreamSecretKey: "upstream",
		TokenSecretKey:    defaultTokenSecretKey,
		PoliciesConfigMap: "sluice-policies",
		CPURequest:        "50m",
		MemoryRequest:     "64Mi",
		MemoryLimit:       "128Mi",
		PrometheusScrape:  true,
	}
}

// refused are the sidecar's settings the injector never writes as
// arguments: a secret does not belong in a pod spec, and the policies
// file's path is the mounted ConfigMap's.
var refused = map[string]string{
	"upstream":    "the address (and its password) would be written into the pod spec: put it in a Secret and give --upstream-secret",
	"requirepass": "the password would be written into the pod spec; the sidecar listens on loopback and needs none",
	"http-token":  httpTokenRefused,
	"policies":    "the policies file is the mounted ConfigMap's: give --policies-configmap",
}

// Register makes every setting a flag of fs, the sidecar's through
// settings.Config.Register. The same names, after "sluice.io/", are the pod
// annotations that override them (ForPod).
func (s *Settings) Register(fs *flag.FlagSet) {
	fs.StringVar(&s.Image, "image", s.Image, "the sidecar's container `image`")
	fs.BoolVar(&s.Native, "native", s.Native,
		"a native sidecar: an init container with restartPolicy Always (Kubernetes 1.29+); false: a plain container for older clusters")
	fs.StringVar(&s.UpstreamSecret, "upstream-secret", s.UpstreamSecret,
		"`name` of the Secret whose key --upstream-secret-key holds the upstream address (SLUICE_UPSTREAM); empty: the in-memory store")
	fs.StringVar(&s.UpstreamSecretKey, "upstream-secret-key", s.UpstreamSecretKey, "`key` of the upstream address in --upstream-secret")
	s.registerSecrets(fs)
	fs.StringVar(&s.PoliciesConfigMap, "policies-configmap", s.PoliciesConfigMap,
		"`name` of the ConfigMap whose key "+policiesKey+" is the policies file, mounted as a directory at "+PoliciesDir+"; empty: none")
	fs.StringVar(&s.CPURequest, "cpu-request", s.CPURequest, "the sidecar's CPU request (`quantity`; empty: none)")
	fs.StringVar(&s.MemoryRequest, "memory-request", s.MemoryRequest, "the sidecar's memory request (`quantity`; empty: none)")
	fs.StringVar(&s.CPULimit, "cpu-limit", s.CPULimit, "the sidecar's CPU limit (`quantity`; empty: none)")
	fs.StringVar(&s.MemoryLimit, "memory-limit", s.MemoryLimit,
		"the sidecar's memory limit (`quantity`; empty: none); Go's memory limit is set to 85% of it")
	fs.BoolVar(&s.PrometheusScrape, "prometheus-annotations", s.PrometheusScrape,
		"add prometheus.io/scrape, /port and /path annotations for the admin port to pods that have no prometheus.io/scrape")
	s.Sidecar.Register(fs)
}

// RegisterPrefixed is Register with prefix before every flag's name: for
// a command whose own flags (the webhook's --listen) would collide.
func (s *Settings) RegisterPrefixed(fs *flag.FlagSet, prefix string) {
	own := flag.NewFlagSet("", flag.ContinueOnError)
	s.Register(own)
	// A usage that names another setting names it as fs has it.
	rename := regexp.MustCompile(`--[a-z][a-z0-9-]*`)
	own.VisitAll(func(f *flag.Flag) {
		usage := rename.ReplaceAllStringFunc(f.Usage, func(name string) string {
			if own.Lookup(name[2:]) != nil {
				return "--" + prefix + name[2:]
			}
			return name
		})
		fs.Var(f.Value, prefix+f.Name, usage)
	})
}

// CheckFlags refuses the sidecar settings given on fs's command line, each
// name after prefix, that the injector never writes (see refused).
func CheckFlags(fs *flag.FlagSet, prefix string) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if why, ok := refused[strings.TrimPrefix(f.Name, prefix)]; ok && err == nil {
			err = fmt.Errorf("--%s is not an injector setting: %s", f.Name, why)
		}
	})
	return err
}

// ForPod is s with the pod's sluice.io/<setting> annotations applied.
func (s Settings) ForPod(annotations map[string]string) (Settings, error) {
	fs := flag.NewFlagSet("annotations", flag.ContinueOnError)
	s.Register(fs)
	for _, k := range sortedKeys(annotations) {
		name, ok := strings.CutPrefix(k, annotationPrefix)
		if !ok || k == InjectKey || k == StatusKey {
			continue
		}
		if why, ok := refused[name]; ok {
			return s, fmt.Errorf("annotation %s: %s", k, why)
		}
		if fs.Lookup(name) == nil {
			return s, fmt.Errorf("annotation %s: no such setting", k)
		}
		if err := fs.Set(name, annotations[k]); err != nil {
			return s, fmt.Errorf("annotation %s: %q: %v", k, annotations[k], err)
		}
	}
	return s, s.Validate()
}

// Validate checks that s renders a container that can run.
func (s *Settings) Validate() error {
	if s.Image == "" {
		return errors.New("invalid --image: empty")
	}
	if s.Sidecar.Upstream != "" || s.Sidecar.RequirePass != "" {
		return errors.New("the upstream address and password come from --upstream-secret, never from the pod spec")
	}
	if s.UpstreamSecret != "" && s.UpstreamSecretKey == "" {
		return errors.New("invalid --upstream-secret-key: empty")
	}
	for _, q := range []struct{ name, v string }{
		{"cpu-request", s.CPURequest}, {"memory-request", s.MemoryRequest},
		{"cpu-limit", s.CPULimit}, {"memory-limit", s.MemoryLimit},
	} {
		if q.v == "" {
			continue
		}
		if _, err := resource.ParseQuantity(q.v); err != nil {
			return fmt.Errorf("invalid --%s %q: %v", q.name, q.v, err)
		}
	}
	if _, err := s.adminPort(); err != nil {
		return err
	}
	if err := s.checkSocket(); err != nil {
		return err
	}
	return s.checkDerived(s.sidecarConfig())
}

// socketDir is the directory of the Unix socket the sidecar listens on
// (--listen unix:PATH), which the injector makes a volume that every
// container of the pod mounts; "" for TCP.
func (s *Settings) socketDir() string {
	if path := settings.SocketPath(s.Sidecar.Listen); path != "" {
		return filepath.Dir(path)
	}
	return ""
}

// checkSocket refuses a socket path the shared volume cannot hold.
func (s *Settings) checkSocket() error {
	path := settings.SocketPath(s.Sidecar.Listen)
	if path == "" {
		return nil
	}
	dir := filepath.Dir(path)
	switch {
	case !filepath.IsAbs(path) || filepath.Clean(path) != path:
		return fmt.Errorf("invalid --listen %q: the socket's path must be absolute and clean, as the containers mount its directory", s.Sidecar.Listen)
	case dir == "/":
		return fmt.Errorf("invalid --listen %q: the socket needs a directory of its own, which the containers mount; not /", s.Sidecar.Listen)
	case s.PoliciesConfigMap != "" && (strings.HasPrefix(dir+"/", PoliciesDir+"/") || strings.HasPrefix(PoliciesDir+"/", dir+"/")):
		return fmt.Errorf("invalid --listen %q: the socket's directory would overlap the policies' %s", s.Sidecar.Listen, PoliciesDir)
	}
	return nil
}

// sidecarConfig is the sidecar's settings as the container runs them:
// the policies file where the ConfigMap is mounted, and a socket's mode
// open to the pod's other containers unless the pod gives one.
func (s *Settings) sidecarConfig() settings.Config {
	c := s.Sidecar
	c.Policies = s.policiesFile()
	if s.socketDir() != "" && c.ListenPerm == "" {
		c.ListenPerm = socketPerm
	}
	_ = s.sizeMemory(&c) // an error is Validate's (checkDerived)
	return c
}

func (s *Settings) adminPort() (int32, error) {
	if s.Sidecar.AdminListen == "" {
		return 0, errors.New("invalid --admin-listen off: the probes need the admin port")
	}
	_, port, err := net.SplitHostPort(s.Sidecar.AdminListen)
	if err != nil {
		return 0, fmt.Errorf("invalid --admin-listen %q: the probes need the admin port: %v", s.Sidecar.AdminListen, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("invalid --admin-listen %q: the probes need a fixed port number", s.Sidecar.AdminListen)
	}
	return int32(n), nil
}

func (s *Settings) policiesFile() string {
	if s.PoliciesConfigMap == "" {
		return s.Sidecar.Policies
	}
	return PoliciesDir + "/" + policiesKey
}

// Args are the sidecar's command-line arguments: one for each setting
// whose value differs from the binary's default, in the table's order.
func (s *Settings) Args() []string {
	defaults := flag.NewFlagSet("defaults", flag.ContinueOnError)
	d := settings.Default()
	d.Register(defaults)
	cur := flag.NewFlagSet("sidecar", flag.ContinueOnError)
	c := s.sidecarConfig()
	c.Register(cur)
	var args []string
	cur.VisitAll(func(f *flag.Flag) {
		if def := defaults.Lookup(f.Name); def == nil || f.Value.String() != def.DefValue {
			args = append(args, "--"+f.Name+"="+f.Value.String())
		}
	})
	return args
}

// Container is the sidecar container and the volumes it needs. s must
// be valid.
func (s *Settings) Container() (corev1.Container, []corev1.Volume) {
	port, _ := s.adminPort()
	probe := func(path string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: path, Port: intstr.FromString(AdminPortName), Scheme: corev1.URISchemeHTTP}},
			PeriodSeconds: period, FailureThreshold: failures, TimeoutSeconds: 1,
		}
	}
	c := corev1.Container{
		Name:  ContainerName,
		Image: s.Image,
		Args:  s.Args(),
		Ports: []corev1.ContainerPort{{Name: AdminPortName, ContainerPort: port, Protocol: corev1.ProtocolTCP}},
		// Start-up waits only for the process, never for Redis: a native
		// sidecar's startup probe holds the application back, and with
		// Redis down in deny mode the pod would never start.
		StartupProbe:             probe("/healthz", 1, 30),
		LivenessProbe:            probe("/healthz", 10, 3),
		ReadinessProbe:           probe("/readyz", 5, 2),
		Resources:                s.resources(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr(true),
			RunAsUser:                ptr(int64(User)),
			RunAsGroup:               ptr(int64(User)),
			AllowPrivilegeEscalation: ptr(false),
			ReadOnlyRootFilesystem:   ptr(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
	if s.Native {
		c.RestartPolicy = ptr(corev1.ContainerRestartPolicyAlways)
	}
	c.Env = append(s.secretEnv(), s.memoryEnv()...)
	var volumes []corev1.Volume
	if s.PoliciesConfigMap != "" {
		// A directory, not a subPath: the kubelet swaps the directory's
		// symlink on a ConfigMap update, which the sidecar's watcher
		// follows; a subPath mount would never change.
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: policiesVolume, MountPath: PoliciesDir, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: policiesVolume, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: s.PoliciesConfigMap}}}})
	}
	if m, ok := s.SocketMount(); ok {
		// The root filesystem is read-only, and the application's
		// containers must see the socket: a volume of the pod's own.
		c.VolumeMounts = append(c.VolumeMounts, m)
		volumes = append(volumes, corev1.Volume{Name: SocketVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	return c, volumes
}

// SocketMount is the mount of the volume that holds the sidecar's Unix
// socket, the same in the sidecar and in the containers it serves; false
// when the sidecar listens on TCP.
func (s *Settings) SocketMount() (corev1.VolumeMount, bool) {
	dir := s.socketDir()
	if dir == "" {
		return corev1.VolumeMount{}, false
	}
	return corev1.VolumeMount{Name: SocketVolume, MountPath: dir}, true
}

func (s *Settings) resources() corev1.ResourceRequirements {
	var r corev1.ResourceRequirements
	set := func(list *corev1.ResourceList, name corev1.ResourceName, v string) {
		if v == "" {
			return
		}
		if *list == nil {
			*list = corev1.ResourceList{}
		}
		(*list)[name] = resource.MustParse(v)
	}
	set(&r.Requests, corev1.ResourceCPU, s.CPURequest)
	set(&r.Requests, corev1.ResourceMemory, s.MemoryRequest)
	set(&r.Limits, corev1.ResourceCPU, s.CPULimit)
	set(&r.Limits, corev1.ResourceMemory, s.MemoryLimit)
	return r
}

func ptr[T any](v T) *T { return &v }
