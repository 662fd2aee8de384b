package template

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// User IDs of launcher containers.
const (
	rootUID    int64 = 0
	nonRootUID int64 = 107 // qemu
)

const (
	// libvirtStartupDelay is added to probes' initial delay: the guest
	// cannot answer before libvirt started it.
	libvirtStartupDelay = 10
	capNetBindService   = "NET_BIND_SERVICE"
	capSysNice          = "SYS_NICE"
	virtPrivateDir      = "/var/run/kubevirt-private"
)

// isNonRoot tells whether the VMI's launcher runs as qemu (107): virt-api
// sets status.runtimeUser unless the Root feature gate is on.
func isNonRoot(vmi *virtv1.VirtualMachineInstance) bool {
	_, annotated := vmi.Annotations[virtv1.DeprecatedNonRootVMIAnnotation]
	return annotated || vmi.Status.RuntimeUser != 0
}

func runtimeUID(vmi *virtv1.VirtualMachineInstance) int64 {
	if isNonRoot(vmi) {
		return nonRootUID
	}
	return rootUID
}

// container is what KubeVirt's ContainerSpecRenderer assembles; render
// returns the container in its field order.
type container struct {
	name, image       string
	pullPolicy        corev1.PullPolicy
	uid               int64
	devices           []corev1.VolumeDevice
	mounts            []corev1.VolumeMount
	sharedFilesystems []string
	resources         corev1.ResourceRequirements
	liveness          *corev1.Probe
	readiness         *corev1.Probe
	ports             []corev1.ContainerPort
	capabilities      *corev1.Capabilities
	args              []string
	extraEnv          []corev1.EnvVar
}

func (c *container) render(command []string) corev1.Container {
	return corev1.Container{
		Name:                     c.name,
		Image:                    c.image,
		ImagePullPolicy:          c.pullPolicy,
		SecurityContext:          containerSecurityContext(c.uid, c.capabilities),
		Command:                  command,
		VolumeDevices:            c.devices,
		VolumeMounts:             c.mounts,
		Resources:                c.resources,
		Ports:                    c.ports,
		Env:                      c.env(),
		LivenessProbe:            c.liveness,
		ReadinessProbe:           c.readiness,
		Args:                     c.args,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

func (c *container) env() []corev1.EnvVar {
	var env []corev1.EnvVar
	if c.uid != 0 {
		// A non-root libvirt keeps its state where the user can write.
		env = append(env,
			corev1.EnvVar{Name: "XDG_CACHE_HOME", Value: virtPrivateDir},
			corev1.EnvVar{Name: "XDG_CONFIG_HOME", Value: virtPrivateDir},
			corev1.EnvVar{Name: "XDG_RUNTIME_DIR", Value: "/var/run"})
	}
	if len(c.sharedFilesystems) > 0 {
		env = append(env, corev1.EnvVar{Name: "SHARED_FILESYSTEM_PATHS", Value: strings.Join(c.sharedFilesystems, ":")})
	}
	return append(env, c.extraEnv...)
}

// dropAll drops every capability, keeping any added ones.
func (c *container) dropAll() {
	if c.capabilities == nil {
		c.capabilities = &corev1.Capabilities{}
	}
	c.capabilities.Drop = []corev1.Capability{"ALL"}
}

func containerSecurityContext(uid int64, capabilities *corev1.Capabilities) *corev1.SecurityContext {
	nonRoot := uid != 0
	sc := &corev1.SecurityContext{RunAsUser: ptr.To(uid), RunAsNonRoot: ptr.To(nonRoot), Capabilities: capabilities}
	if nonRoot {
		sc.RunAsGroup = ptr.To(uid)
		sc.AllowPrivilegeEscalation = ptr.To(false)
	}
	return sc
}

// computeCapabilities: NET_BIND_SERVICE for the guest's low ports, and for
// a root launcher SYS_NICE for realtime and dedicated CPUs.
func computeCapabilities(vmi *virtv1.VirtualMachineInstance) []corev1.Capability {
	caps := []corev1.Capability{capNetBindService}
	if !isNonRoot(vmi) {
		caps = append(caps, capSysNice)
	}
	return caps
}

// containerPorts are the interfaces' declared ports, TCP by default.
func containerPorts(vmi *virtv1.VirtualMachineInstance) []corev1.ContainerPort {
	var ports []corev1.ContainerPort
	for _, iface := range vmi.Spec.Domain.Devices.Interfaces {
		for _, p := range iface.Ports {
			protocol := p.Protocol
			if protocol == "" {
				protocol = "TCP"
			}
			ports = append(ports, corev1.ContainerPort{Protocol: corev1.Protocol(protocol), Name: p.Name, ContainerPort: p.Port})
		}
	}
	return ports
}

// probe turns a VMI probe into the compute container's: exec probes and
// guest-agent pings run through virt-probe inside the guest, and every
// probe waits for libvirt to start the guest.
func probe(vmi *virtv1.VirtualMachineInstance, p *virtv1.Probe) *corev1.Probe {
	p = p.DeepCopy()
	virtv1.SetDefaults_Probe(p)
	out := &corev1.Probe{
		InitialDelaySeconds: p.InitialDelaySeconds,
		TimeoutSeconds:      p.TimeoutSeconds,
		PeriodSeconds:       p.PeriodSeconds,
		SuccessThreshold:    p.SuccessThreshold,
		FailureThreshold:    p.FailureThreshold,
		ProbeHandler: corev1.ProbeHandler{
			Exec:      p.Exec,
			HTTPGet:   p.HTTPGet,
			TCPSocket: p.TCPSocket,
		},
	}
	domain := vmi.Namespace + "_" + vmi.Name
	switch {
	case p.GuestAgentPing != nil:
		out.Exec = &corev1.ExecAction{Command: []string{"virt-probe", "--domainName", domain,
			"--timeoutSeconds", strconv.FormatInt(int64(out.TimeoutSeconds), 10), "--guestAgentPing"}}
		out.TimeoutSeconds++
	case out.Exec != nil && len(out.Exec.Command) > 0 && out.Exec.Command[0] != "virt-probe":
		command := []string{"virt-probe", "--domainName", domain,
			"--timeoutSeconds", strconv.FormatInt(int64(out.TimeoutSeconds), 10), "--command", out.Exec.Command[0], "--"}
		out.Exec.Command = append(command, out.Exec.Command[1:]...)
		out.TimeoutSeconds++
	}
	out.InitialDelaySeconds += libvirtStartupDelay
	return out
}
