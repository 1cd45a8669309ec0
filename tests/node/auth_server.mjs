// An OAuth 2.1 authorization server for the integration tests: oidc-provider on 127.0.0.1 with an
// ephemeral port, issuing client-credentials access tokens (JWT, or opaque when the resource URL
// contains "opaque"), introspecting them (RFC 7662), exchanging them (RFC 8693), and serving its
// metadata at both /.well-known/openid-configuration and /.well-known/oauth-authorization-server.
//
// Clients: alice, bob and proxy, each with the secret "<id>-secret" (client_secret_basic or
// client_secret_post). Any absolute http(s) URL is a resource; its scopes are mcp:tools and
// mcp:admin. A token request may add `ttl` (seconds) for a lifetime other than 300 s.
//
// Test-only control endpoints, on the same listener:
//   POST /test/sign     {"claims": {...}, "alg": "RS256"|"ES256"|"EdDSA", "kid"?: "..."}
//                       -> {"token": "<JWT signed with the current key for alg>"}
//   POST /test/rotate   a new RS256 signing key, listed first in the JWKS (the old one stays)
//                       -> {"kid": "<new kid>"}
//   POST /test/down     every other endpoint answers 503 from now on (still counted), as an
//                       issuer that cannot serve would -> {"down": true}
//   POST /test/up       serves again -> {"down": false}
//   GET  /test/requests -> {"discovery": n, "jwks": n, "introspection": n, "token": n,
//                           "exchange": n} requests received so far ("token" counts exchanges too)
//
// Prints one line, {"issuer":"http://127.0.0.1:<port>"}, once it listens; exits when killed or
// when its stdin ends. Nothing else goes to stdout.

import * as http from 'node:http';
import { randomUUID } from 'node:crypto';

import Provider, { errors } from 'oidc-provider';
import {
  SignJWT, createLocalJWKSet, exportJWK, generateKeyPair, jwtVerify,
} from 'jose';

// oidc-provider prints its development notices with console.info: keep them off stdout.
console.info = console.error;
console.log = console.error;

const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
const JWT_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:jwt';
const RESOURCE_SCOPE = 'mcp:tools mcp:admin';
const DEFAULT_TTL = 300;

// ---------------------------------------------------------------------------------------------
// Signing keys. `keys` keeps, per alg, the private CryptoKey and the private JWK handed to
// oidc-provider; RS256 keys are newest first, and the first one signs.

let serial = 0;

async function newKey(alg) {
  const generated = alg === 'EdDSA'
    ? await generateKeyPair('Ed25519', { extractable: true })
    : await generateKeyPair(alg, { extractable: true });
  serial += 1;
  const kid = `${alg.toLowerCase()}-${serial}-${randomUUID().slice(0, 8)}`;
  const jwk = {
    ...(await exportJWK(generated.privateKey)), kid, use: 'sig', alg,
  };
  return { alg, kid, privateKey: generated.privateKey, jwk };
}

const keys = {
  RS256: [await newKey('RS256')],
  ES256: [await newKey('ES256')],
  EdDSA: [await newKey('EdDSA')],
};

function allKeys() {
  return [...keys.RS256, ...keys.ES256, ...keys.EdDSA];
}

function publicJwks() {
  return {
    keys: allKeys().map(({ jwk }) => {
      const { d, p, q, dp, dq, qi, ...rest } = jwk;
      return rest;
    }),
  };
}

// Signs with the current key for `alg`; `kid` overrides the header's key id.
async function sign(claims, alg = 'RS256', kid = undefined) {
  const [key] = keys[alg];
  return new SignJWT(claims)
    .setProtectedHeader({ alg, typ: 'at+jwt', kid: kid ?? key.kid })
    .sign(key.privateKey);
}

// ---------------------------------------------------------------------------------------------
// Storage shared by every Provider instance (a rotation builds a new one), so opaque tokens
// issued before a rotation stay introspectable.

const store = new Map();

class SharedMemoryAdapter {
  constructor(model) {
    this.model = model;
  }

  key(id) {
    return `${this.model}:${id}`;
  }

  async upsert(id, payload, expiresIn) {
    const expiresAt = expiresIn ? Date.now() + expiresIn * 1000 : undefined;
    store.set(this.key(id), { payload, expiresAt });
  }

  async find(id) {
    const entry = store.get(this.key(id));
    if (!entry) return undefined;
    if (entry.expiresAt !== undefined && entry.expiresAt <= Date.now()) {
      store.delete(this.key(id));
      return undefined;
    }
    return entry.payload;
  }

  async findByUserCode() {
    return undefined;
  }

  async findByUid() {
    return undefined;
  }

  async consume(id) {
    const payload = await this.find(id);
    if (payload) payload.consumed = Math.floor(Date.now() / 1000);
  }

  async destroy(id) {
    store.delete(this.key(id));
  }

  async revokeByGrantId() {}
}

// ---------------------------------------------------------------------------------------------
// Provider configuration.

function requestedTtl(value) {
  const ttl = Number(value);
  return Number.isInteger(ttl) && ttl > 0 ? ttl : undefined;
}

function isHttpUrl(value) {
  const url = URL.parse(value);
  return url !== null && (url.protocol === 'http:' || url.protocol === 'https:');
}

function configuration() {
  const clientCredentialsTtl = (ctx, token) => token.resourceServer?.accessTokenTTL
    ?? requestedTtl(ctx?.oidc?.body?.ttl) ?? DEFAULT_TTL;
  return {
    adapter: SharedMemoryAdapter,
    jwks: { keys: allKeys().map(({ jwk }) => jwk) },
    clients: ['alice', 'bob', 'proxy'].map((id) => ({
      client_id: id,
      client_secret: `${id}-secret`,
      token_endpoint_auth_method: 'client_secret_basic',
      grant_types: ['client_credentials', TOKEN_EXCHANGE],
      response_types: [],
      redirect_uris: [],
    })),
    scopes: ['openid', 'offline_access', 'mcp:tools', 'mcp:admin'],
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      introspection: {
        enabled: true,
        // Any authenticated client (the proxy, above all) may introspect any token.
        allowedPolicy: async () => true,
      },
      resourceIndicators: {
        enabled: true,
        defaultResource: async () => undefined,
        useGrantedResource: async () => true,
        getResourceServerInfo: async (ctx, resourceIndicator) => {
          if (!isHttpUrl(resourceIndicator)) {
            throw new errors.InvalidTarget();
          }
          return {
            scope: RESOURCE_SCOPE,
            audience: resourceIndicator,
            accessTokenTTL: requestedTtl(ctx?.oidc?.body?.ttl) ?? DEFAULT_TTL,
            accessTokenFormat: resourceIndicator.includes('opaque') ? 'opaque' : 'jwt',
            jwt: { sign: { alg: 'RS256' } },
          };
        },
      },
    },
    // Introspection answers with the same `sub` as the JWT access tokens: the client's id.
    extraTokenClaims: async (ctx, token) => (
      token.kind === 'ClientCredentials' ? { sub: token.clientId } : undefined
    ),
    ttl: {
      AccessToken: clientCredentialsTtl,
      ClientCredentials: clientCredentialsTtl,
      Grant: 3600,
      Session: 3600,
      Interaction: 600,
    },
    clientBasedCORS: () => false,
  };
}

// ---------------------------------------------------------------------------------------------
// RFC 8693 token exchange: a JWT access token of this server for one with another audience,
// acting on behalf of its subject.

async function tokenExchange(ctx) {
  requests.exchange += 1;
  const { params, client, provider } = ctx.oidc;
  if (!params.subject_token) {
    throw new errors.InvalidRequest('missing required parameter subject_token');
  }
  if (!params.subject_token_type) {
    throw new errors.InvalidRequest('missing required parameter subject_token_type');
  }
  if (![ACCESS_TOKEN_TYPE, JWT_TOKEN_TYPE].includes(params.subject_token_type)) {
    throw new errors.InvalidRequest('unsupported subject_token_type');
  }
  if (params.requested_token_type && params.requested_token_type !== ACCESS_TOKEN_TYPE) {
    throw new errors.InvalidRequest('only access tokens can be requested');
  }
  const audience = params.resource ?? params.audience;
  if (!audience) {
    throw new errors.InvalidTarget('resource or audience is required');
  }
  if (params.resource !== undefined && !isHttpUrl(params.resource)) {
    throw new errors.InvalidTarget('resource indicator must be an absolute http(s) URL');
  }

  let subject;
  try {
    ({ payload: subject } = await jwtVerify(params.subject_token, createLocalJWKSet(publicJwks()), {
      issuer: provider.issuer,
      typ: 'at+jwt',
      algorithms: ['RS256', 'ES256', 'EdDSA'],
    }));
  } catch (cause) {
    throw new errors.InvalidGrant(`subject_token is invalid: ${cause.message}`);
  }
  if (!subject.sub) {
    throw new errors.InvalidGrant('subject_token has no sub');
  }

  const now = Math.floor(Date.now() / 1000);
  let exp = now + (requestedTtl(params.ttl) ?? DEFAULT_TTL);
  if (typeof subject.exp === 'number' && subject.exp < exp) {
    exp = subject.exp;
  }
  const act = subject.act ? { sub: client.clientId, act: subject.act } : { sub: client.clientId };
  const scope = params.scope ?? subject.scope;
  const accessToken = await sign({
    iss: provider.issuer,
    sub: subject.sub,
    aud: audience,
    client_id: client.clientId,
    act,
    ...(scope ? { scope } : {}),
    iat: now,
    exp,
    jti: randomUUID(),
  });

  ctx.body = {
    access_token: accessToken,
    issued_token_type: ACCESS_TOKEN_TYPE,
    token_type: 'Bearer',
    expires_in: exp - now,
    ...(scope ? { scope } : {}),
  };
}

function newProvider(issuer) {
  const provider = new Provider(issuer, configuration());
  provider.registerGrantType(TOKEN_EXCHANGE, tokenExchange, [
    'subject_token', 'subject_token_type', 'actor_token', 'actor_token_type',
    'audience', 'resource', 'scope', 'requested_token_type', 'ttl',
  ]);
  provider.on('server_error', (_ctx, error) => console.error('auth server error:', error));
  return provider;
}

// ---------------------------------------------------------------------------------------------
// The listener: counts what the proxy asks for, answers /test/*, hands the rest to the current
// provider.

const requests = {
  discovery: 0, jwks: 0, introspection: 0, token: 0, exchange: 0,
};
const counted = {
  '/.well-known/oauth-authorization-server': 'discovery',
  '/.well-known/openid-configuration': 'discovery',
  '/jwks': 'jwks',
  '/token/introspection': 'introspection',
  '/token': 'token',
};

// While down, every endpoint but /test/* answers 503.
let down = false;

let issuer;
let provider;
let handle;

function answer(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' });
  res.end(text);
}

async function jsonBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? JSON.parse(text) : {};
}

async function control(req, res, path) {
  if (req.method === 'POST' && path === '/test/sign') {
    const { claims = {}, alg = 'RS256', kid } = await jsonBody(req);
    if (!keys[alg]) {
      answer(res, 400, { error: `alg must be one of ${Object.keys(keys).join(', ')}` });
      return;
    }
    answer(res, 200, { token: await sign(claims, alg, kid) });
  } else if (req.method === 'POST' && path === '/test/rotate') {
    const key = await newKey('RS256');
    keys.RS256.unshift(key);
    provider = newProvider(issuer);
    handle = provider.callback();
    answer(res, 200, { kid: key.kid });
  } else if (req.method === 'POST' && (path === '/test/down' || path === '/test/up')) {
    down = path === '/test/down';
    answer(res, 200, { down });
  } else if (req.method === 'GET' && path === '/test/requests') {
    answer(res, 200, requests);
  } else {
    answer(res, 404, { error: 'no such test endpoint' });
  }
}

const server = http.createServer((req, res) => {
  const path = new URL(req.url, 'http://127.0.0.1').pathname;
  if (path.startsWith('/test/')) {
    control(req, res, path).catch((error) => answer(res, 500, { error: String(error) }));
    return;
  }
  if (counted[path]) {
    requests[counted[path]] += 1;
  }
  if (down) {
    answer(res, 503, { error: 'temporarily_unavailable' });
    return;
  }
  handle(req, res);
});

server.listen(0, '127.0.0.1', () => {
  issuer = `http://127.0.0.1:${server.address().port}`;
  provider = newProvider(issuer);
  handle = provider.callback();
  process.stdout.write(`${JSON.stringify({ issuer })}\n`);
});

// A parent that goes away closes our stdin: leave with it.
process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();
