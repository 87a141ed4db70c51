package teamster

import "strings"

// Tenants. A gateway with an identity (its gatewayId, which NATS
// permissions bind to its credentials) is a tenant: every session key,
// attempt id and source id it names lives in a namespace of its own, so no
// other tenant can reach, probe, collide with or burn them. Requests without
// an identity (the plain subjects of a fleet without per-principal
// permissions) belong to the unnamed tenant "".
//
// Inside the fleet (Redis keys, the worker's runs) a name is used in its
// scoped form, Scope(tenant, name). The separator is a control character,
// which no session key (the decoders refuse control characters) and no
// identifier contains: a scoped name of one tenant is never the name, plain
// or scoped, of another.
const tenantSep = "\x1f"

// Scope is name in tenant's namespace: name itself for the unnamed tenant.
func Scope(tenant, name string) string {
	if tenant == "" {
		return name
	}
	return tenant + tenantSep + name
}

// Unscope splits a scoped name into its tenant and the name the tenant
// knows it by.
func Unscope(scoped string) (tenant, name string) {
	if t, n, ok := strings.Cut(scoped, tenantSep); ok {
		return t, n
	}
	return "", scoped
}

// ScopedDisplay is a scoped name for people: "name" for the unnamed tenant,
// "tenant/name" for another (logs and the operator CLI; never parsed).
func ScopedDisplay(scoped string) string {
	t, n := Unscope(scoped)
	if t == "" {
		return n
	}
	return t + "/" + n
}
