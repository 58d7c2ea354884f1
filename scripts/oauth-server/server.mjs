// A real OAuth 2.1 authorization server for the HTTP transport's OAuth tests: oidc-provider
// (pinned by package-lock.json), on loopback only, with dynamic client registration, PKCE
// required, RFC 8707 resource indicators and JWT access tokens for the named resources.
//
//   node server.mjs --keys FILE --resource URI [--resource URI ...] [--port N] [--ttl S]
//                   [--alg ALG] [--opaque --introspector ID:SECRET]
//
// FILE holds the private signing keys as a JWKS ({"keys": [...]}, each with a kid and an
// alg); the first key of the alg a resource asks for signs. The access tokens are JWTs
// (RS256 unless --alg says otherwise) whose aud is the resource; with --opaque they are
// opaque, and the client ID:SECRET of --introspector may introspect them (RFC 7662,
// client_secret_basic). The interaction (login
// and consent) is answered at once for the account "tester" with every scope asked for:
// no form, so the tests can follow the redirects from the authorize URL to the code.
// Prints "listening on http://127.0.0.1:PORT" once it serves.

import fs from 'node:fs';
import http from 'node:http';
import { parseArgs } from 'node:util';

import Provider, { errors } from 'oidc-provider';

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    keys: { type: 'string' },
    resource: { type: 'string', multiple: true, default: [] },
    ttl: { type: 'string', default: '300' },
    alg: { type: 'string', default: 'RS256' },
    opaque: { type: 'boolean', default: false },
    introspector: { type: 'string' },
  },
});

const RESOURCE_SCOPES = 'read write shell';
const jwks = JSON.parse(fs.readFileSync(values.keys, 'utf8'));
const resources = new Set(values.resource);
const ttl = Number(values.ttl);

const server = http.createServer();
await new Promise((resolve) => server.listen(Number(values.port), '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  jwks,
  // The resource server's own client, for RFC 7662 introspection of opaque tokens.
  clients: values.introspector
    ? [{
        client_id: values.introspector.split(':')[0],
        client_secret: values.introspector.split(':').slice(1).join(':'),
        grant_types: [],
        response_types: [],
        redirect_uris: [],
        token_endpoint_auth_method: 'client_secret_basic',
      }]
    : [],
  cookies: { keys: ['only-for-the-tests-on-loopback'] },
  scopes: ['openid', 'offline_access', ...RESOURCE_SCOPES.split(' ')],
  clientDefaults: {
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: 'none',
    id_token_signed_response_alg: values.alg,
  },
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true },
    introspection: { enabled: Boolean(values.introspector) },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, indicator) => {
        if (!resources.has(indicator)) {
          throw new errors.InvalidTarget();
        }
        return {
          scope: RESOURCE_SCOPES,
          audience: indicator,
          accessTokenTTL: ttl,
          accessTokenFormat: values.opaque ? 'opaque' : 'jwt',
          jwt: { sign: { alg: values.alg } },
        };
      },
    },
  },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  findAccount: async (ctx, id) => ({ accountId: id, claims: async () => ({ sub: id }) }),
  ttl: { AccessToken: ttl, AuthorizationCode: 60, Grant: 3600, Interaction: 300, Session: 3600 },
});

// The interaction: log "tester" in, then grant every scope the request asks for.
provider.use(async (ctx, next) => {
  const match = /^\/interaction\/[\w-]+$/.exec(ctx.path);
  if (match === null || ctx.method !== 'GET') {
    return next();
  }
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  let result;
  if (details.prompt.name === 'login') {
    result = { login: { accountId: 'tester' } };
  } else {
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
    const missing = details.prompt.details;
    if (missing.missingOIDCScope) {
      grant.addOIDCScope(missing.missingOIDCScope.join(' '));
    }
    if (missing.missingOIDCClaims) {
      grant.addOIDCClaims(missing.missingOIDCClaims);
    }
    for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
      grant.addResourceScope(indicator, scopes.join(' '));
    }
    result = { consent: { grantId: await grant.save() } };
  }
  const to = await provider.interactionResult(ctx.req, ctx.res, result, { mergeWithLastSubmission: true });
  ctx.status = 303;
  ctx.set('location', to);
  ctx.body = '';
});

server.on('request', provider.callback());
process.on('SIGTERM', () => server.close(() => process.exit(0)));
process.stdout.write(`listening on ${issuer}\n`);
