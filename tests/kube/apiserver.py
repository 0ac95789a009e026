"""A Kubernetes API server for wasched's Kubernetes-mode tests: kmock's KubernetesEmulator (PyPI
`kmock`, written by others) plus exactly what a scheduler needs of a real API server and kmock
lacks (see ../shared/TESTING.md):

- `metadata.resourceVersion` from one counter (as etcd's revision), `uid` and
  `creationTimestamp` on create; list metadata carries the current resourceVersion; writes are
  applied one at a time, so watches deliver events in resourceVersion order under concurrent
  clients (kmock interleaves them, and a watch resuming after version N would skip a lower one
  recorded late);
- watches that start after the resourceVersion they are given (kmock replays every object as
  ADDED), end after `timeoutSeconds`, and answer `410 Gone` (an ERROR event with code 410) for a
  resourceVersion older than the events kept;
- the `pods/{name}/binding` subresource (201; 409 when the pod is already bound; 404 when it is
  gone) and the `pods/{name}/status` subresource (merges `status` only);
- a resourceVersion precondition on update (409 Conflict when it is stale);
- full updates (PUT to a named object, as kube-scheduler writes volumes and claims; kmock serves
  only PATCH there): the object is replaced but for its identity and status;
- `reason: NotFound` on a 404 for a missing object (kmock says "Object Not Found");
- Event validation's note limit: 422 for a `note` over 1,024 bytes;
- `fieldSelector` on `metadata.name` / `metadata.namespace` and equality `labelSelector`s on
  lists and watches (kmock returns every object);
- lists in pages of `limit` objects, continued by `continue`, each page from the first page's
  snapshot and naming its resourceVersion, as an API server serves a list from one etcd revision
  (kmock answers a list in one page, whatever its size). The snapshot holds the objects, not
  copies: one changed between pages is served as it is then, newer than the list's version.

Test hooks under /_test/: `POST /_test/drop-watches` ends every open watch at once (a dropped
connection), `POST /_test/block-watches` also answers every list and watch with 503 until
`POST /_test/unblock-watches` (a network partition), `POST /_test/compact` forgets the kept events (the next watch from an older
resourceVersion gets 410), `POST /_test/fail-bindings` with `{"status": 500, "count": 3}` makes the
next bindings fail, `POST /_test/slow-bindings` with `{"seconds": 5, "count": 1}` makes the next
bindings answer that late, `GET /_test/counts` counts the requests by kind, `GET /_test/writes`
lists every write in order (method, path, User-Agent, body), `POST /_test/install` with
`{"resource": "scheduling.x-k8s.io/v1alpha1/podgroups", "kind": "PodGroup", "namespaced": true,
"subresources": ["status"]}` starts serving a resource (a CustomResourceDefinition installed).

Run: python apiserver.py [--port N]; it prints `listening on http://127.0.0.1:PORT` when ready.
"""

import argparse
import asyncio
import collections
import datetime
import json
import sys
import uuid

import aiohttp.web
import kmock
from kmock._internal import enums, parsing

# What a scheduler lists, watches and writes (kmock serves only declared resources).
RESOURCES = [
    ('v1/nodes', 'Node', False, {'status'}),
    ('v1/pods', 'Pod', True, {'status', 'binding'}),
    ('v1/namespaces', 'Namespace', False, set()),
    ('v1/services', 'Service', True, set()),
    ('v1/replicationcontrollers', 'ReplicationController', True, set()),
    ('apps/v1/replicasets', 'ReplicaSet', True, set()),
    ('apps/v1/statefulsets', 'StatefulSet', True, set()),
    ('policy/v1/poddisruptionbudgets', 'PodDisruptionBudget', True, set()),
    ('v1/persistentvolumes', 'PersistentVolume', False, set()),
    ('v1/persistentvolumeclaims', 'PersistentVolumeClaim', True, set()),
    ('storage.k8s.io/v1/storageclasses', 'StorageClass', False, set()),
    ('storage.k8s.io/v1/csinodes', 'CSINode', False, set()),
    ('storage.k8s.io/v1/csidrivers', 'CSIDriver', False, set()),
    ('storage.k8s.io/v1/csistoragecapacities', 'CSIStorageCapacity', True, set()),
    ('resource.k8s.io/v1/deviceclasses', 'DeviceClass', False, set()),
    ('resource.k8s.io/v1/resourceslices', 'ResourceSlice', False, set()),
    ('resource.k8s.io/v1/resourceclaims', 'ResourceClaim', True, {'status'}),
    ('resource.k8s.io/v1/resourceclaimtemplates', 'ResourceClaimTemplate', True, set()),
    ('events.k8s.io/v1/events', 'Event', True, set()),
    ('coordination.k8s.io/v1/leases', 'Lease', True, set()),
    ('v1/configmaps', 'ConfigMap', True, set()),
]

# kmock reads `/api/v1/namespaces[/{name}]` as the start of a namespaced path and fails (500):
# there `namespaces` is the resource, as for any cluster-scoped kind.
_parse_path = parsing.parse_path


def _parse_path_with_namespaces(path: str) -> parsing.ParsedPath:
    parts = path.strip('/').split('/')
    if len(parts) in (3, 4) and parts[:3] == ['api', 'v1', 'namespaces']:
        name = parts[3] if len(parts) == 4 else None
        return parsing.ParsedPath('', 'v1', 'namespaces', None, name, None)
    return _parse_path(path)


parsing.parse_path = _parse_path_with_namespaces

# Events kept for watches that resume from a resourceVersion; older ones get 410 Gone.
KEPT_EVENTS = 100_000


class ApiServer(kmock.KubernetesEmulator):
    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._requests = _RecentRequests()
        self.revision = 0
        self.history: list[tuple[int, object, dict]] = []  # (rv, resource, event)
        self.oldest_kept = 1
        # Set, then replaced, on every change. A watch waits on the Event it saw with a timeout;
        # cancelling an Event's wait is safe, while cancelling a Condition's wait (as
        # `asyncio.wait_for` does on its timeout) can leave the Condition's lock released under
        # its holder, which then raises "Lock is not acquired" and wedges every later writer.
        self.changed = asyncio.Event()
        self.watch_generation = 0
        self.watches_blocked = False
        # Lists being paged: continue token -> (revision, the objects listed).
        self.paged_lists: dict[str, tuple[int, list]] = {}
        self.binding_failures: list[int] = []
        self.binding_delays: list[float] = []
        self.counts: collections.Counter[str] = collections.Counter()
        # When each pod was created, until it is bound; then the seconds from one to the other.
        self.pod_created: dict[tuple[str, str], float] = {}
        self.bind_latencies: list[float] = []
        # Every write in arrival order: method, path, the client's User-Agent and the body.
        self.writes: list[dict] = []
        # One write at a time, from taking its resourceVersion to recording its watch event, so
        # watches see events in resourceVersion order (as etcd delivers them) however many
        # clients write at once.
        self.writing = asyncio.Lock()
        for key, kind, namespaced, subresources in RESOURCES:
            self.resources[key] = {'kind': kind, 'namespaced': namespaced,
                                   'subresources': subresources}

    def _next_revision(self) -> str:
        self.revision += 1
        return str(self.revision)

    async def _record(self, resource, kind: str, raw: dict) -> None:
        event = {'type': kind, 'object': json.loads(json.dumps(raw))}
        rv = int(raw['metadata']['resourceVersion'])
        self.history.append((rv, resource, event))
        if len(self.history) > KEPT_EVENTS:
            dropped = self.history[: len(self.history) - KEPT_EVENTS]
            self.history = self.history[len(dropped):]
            self.oldest_kept = dropped[-1][0] + 1
        self._notify_watches()

    def _notify_watches(self):
        self.changed.set()
        self.changed = asyncio.Event()

    def _stored(self, request):
        obj = self._by_key(request.resource, request.namespace, request.name)
        if obj is None or obj.deleted:
            return None
        return obj

    def _by_key(self, resource, namespace, name):
        """The stored object of that key, deleted or not, found in the dict kmock keeps them in.
        kmock's own handlers find it by comparing every stored object with the request, so
        each fetch, create, update and delete cost time in proportion to the whole cluster:
        at 5,000 nodes and 10,000 pods a binding compared 15,000 objects."""
        return self._objects._objects.get((resource, namespace, name))

    def _apply(self, request):
        """A create, update (merge patch) or delete of a stored object, as kmock's emulator
        makes it, answered here. Going through kmock's handler instead matched the request
        against every registered reaction first (~1,700 filter checks a request in cProfile),
        which made each request cost ~100 ms of CPU and the emulator, not the scheduler, the
        limit of every Kubernetes-mode figure."""
        meta = request.data.get('metadata', {}) if isinstance(request.data, dict) else {}
        if request.action == enums.action.CREATE:
            key = (request.resource, request.namespace or meta.get('namespace'), meta.get('name'))
            obj = self._objects._objects.get(key)
            if obj is not None and not obj.deleted:
                return _status(409, 'AlreadyExists',
                               f'{request.resource.plural} "{key[2]}" already exists')
            if obj is None:
                self._objects[key] = request.data
            else:
                obj.create(request.data)
            return aiohttp.web.json_response(self._objects._objects[key].raw, status=201)
        key = (request.resource, request.namespace, request.name)
        obj = self._objects._objects.get(key)
        if obj is None or obj.deleted:
            return _status(404, 'NotFound', f'{request.resource.plural} "{request.name}" not found')
        if request.action == enums.action.UPDATE:
            obj.patch(request.data)
            return aiohttp.web.json_response(obj.raw)
        stored_meta = obj.get('metadata', {})
        if stored_meta.get('deletionTimestamp'):
            return aiohttp.web.json_response(obj.raw)
        if stored_meta.get('finalizers', []):
            obj.patch({'metadata': {'deletionTimestamp': _now()}})
            return aiohttp.web.json_response(obj.raw)
        obj.delete()
        return aiohttp.web.json_response(obj.last.raw)

    async def _serve_fetch(self, request):
        obj = self._stored(request)
        if obj is None:
            return await super()._serve_fetch(request)
        return obj.raw

    async def _serve_create(self, request):
        meta = request.data.get('metadata', {}) if isinstance(request.data, dict) else {}
        obj = self._by_key(request.resource, request.namespace or meta.get('namespace'),
                           request.name or meta.get('name'))
        if obj is None:
            return await super()._serve_create(request)
        return obj.raw

    async def _serve_update(self, request):
        obj = self._by_key(request.resource, request.namespace, request.name)
        if obj is None:
            return await super()._serve_update(request)
        return obj.last.raw

    async def _serve_delete(self, request):
        obj = self._by_key(request.resource, request.namespace, request.name)
        if obj is None:
            return await super()._serve_delete(request)
        return obj.last.raw

    async def _handle(self, request):
        if request.url.path.startswith('/_test/'):
            return await self._test_hook(request)
        if request.resource is None:
            return await super()._handle(request)
        self.counts[f'{request.method.value} {request.resource.plural}'
                    + (f'/{request.subresource}' if request.subresource else '')] += 1
        if self.watches_blocked and request.action in (enums.action.LIST, enums.action.WATCH):
            return _status(503, 'ServiceUnavailable', 'partitioned by the test')
        if request.action == enums.action.FETCH and not request.subresource:
            stored = self._stored(request)
            if stored is None:
                # kmock says reason "Object Not Found"; clients (kube-rs's get_opt) look for
                # NotFound.
                return _status(404, 'NotFound',
                               f'{request.resource.plural} "{request.name}" not found')
            return aiohttp.web.json_response(stored.raw)
        if request.action in (enums.action.CREATE, enums.action.UPDATE, enums.action.DELETE) \
                or request.subresource in ('binding', 'status') or _is_replace(request):
            self.writes.append({'method': request.method.value, 'path': request.url.path,
                                'userAgent': next((v for k, v in request.headers.items()
                                                   if k.lower() == 'user-agent'), ''),
                                'body': request.data})
            if request.subresource == 'binding' and self.binding_delays:
                await asyncio.sleep(self.binding_delays.pop(0))
            async with self.writing:
                return await self._write(request)
        return await super()._handle(request)

    async def _write(self, request):
        if request.subresource == 'binding' and request.method.value == 'POST':
            return await self._bind(request)
        if request.subresource == 'status' and request.method.value in ('PATCH', 'PUT'):
            return await self._update_status(request)
        if _is_replace(request):
            return await self._replace(request)
        if request.resource.plural == 'events' and isinstance(request.data, dict) \
                and len(request.data.get('note', '').encode()) > 1024:
            # As the API server's Event validation (NoteLengthLimit).
            return _status(422, 'Invalid', 'Event.events.k8s.io is invalid: note: '
                           'Too long: may not be more than 1024 bytes')
        if request.action == enums.action.CREATE and isinstance(request.data, dict):
            meta = request.data.setdefault('metadata', {})
            meta['uid'] = str(uuid.uuid4())
            meta['creationTimestamp'] = _now()
            meta['resourceVersion'] = self._next_revision()
            response = self._apply(request)
            if response.status < 300:
                created = self._created(request)
                if request.resource.plural == 'pods':
                    meta = created.get('metadata', {})
                    self.pod_created[(meta.get('namespace'), meta.get('name'))] = \
                        asyncio.get_running_loop().time()
                await self._record(request.resource, 'ADDED', created.raw)
            return response
        if request.action == enums.action.UPDATE and isinstance(request.data, dict):
            stored = self._stored(request)
            if stored is None:
                return _status(404, 'NotFound', f'{request.name} not found')
            expected = request.data.get('metadata', {}).get('resourceVersion')
            current = stored.get('metadata', {}).get('resourceVersion')
            if expected and expected != current:
                return _status(409, 'Conflict', 'the object has been modified; please apply '
                               'your changes to the latest version and try again')
            request.data.setdefault('metadata', {})['resourceVersion'] = self._next_revision()
            response = self._apply(request)
            if response.status < 300:
                await self._record(request.resource, 'MODIFIED', stored.raw)
            return response
        if request.action == enums.action.DELETE and request.name is not None:
            stored = self._stored(request)
            if stored is None:
                return _status(404, 'NotFound', f'{request.name} not found')
            last = json.loads(json.dumps(stored.raw))
            response = self._apply(request)
            if response.status < 300:
                last['metadata']['resourceVersion'] = self._next_revision()
                await self._record(request.resource, 'DELETED', last)
            return response
        return await super()._handle(request)

    def _created(self, request):
        meta = request.data.get('metadata', {})
        key = (request.resource, request.namespace or meta.get('namespace'), meta.get('name'))
        return self._objects[key]

    async def _bind(self, request):
        pod = self._stored(request)
        if pod is None:
            return _status(404, 'NotFound', f'pods "{request.name}" not found')
        if self.binding_failures:
            code = self.binding_failures.pop(0)
            return _status(code, 'InternalError', 'injected binding failure')
        if pod.get('spec', {}).get('nodeName'):
            return _status(409, 'Conflict',
                           f'pod {request.name} is already assigned to node "{pod["spec"]["nodeName"]}"')
        node = (request.data or {}).get('target', {}).get('name')
        if not node:
            return _status(400, 'BadRequest', 'a binding needs target.name')
        pod.patch({'spec': {'nodeName': node},
                   'metadata': {'resourceVersion': self._next_revision()}})
        created = self.pod_created.pop((request.namespace, request.name), None)
        if created is not None:
            self.bind_latencies.append(asyncio.get_running_loop().time() - created)
        await self._record(request.resource, 'MODIFIED', pod.raw)
        return aiohttp.web.json_response(
            {'kind': 'Status', 'apiVersion': 'v1', 'status': 'Success', 'code': 201}, status=201)

    async def _replace(self, request):
        """A full update (PUT): the object becomes the one sent, but for its identity and its
        status (written through the status subresource); a stale resourceVersion conflicts."""
        stored = self._stored(request)
        if stored is None:
            return _status(404, 'NotFound', f'{request.name} not found')
        new = json.loads(json.dumps(request.data))
        meta = new.setdefault('metadata', {})
        old = json.loads(json.dumps(stored.raw))
        expected = meta.get('resourceVersion')
        if expected and expected != old['metadata'].get('resourceVersion'):
            return _status(409, 'Conflict', 'the object has been modified; please apply '
                           'your changes to the latest version and try again')
        for kept in ('uid', 'creationTimestamp', 'name', 'namespace'):
            if kept in old['metadata']:
                meta[kept] = old['metadata'][kept]
        if 'status' in old:
            new['status'] = old['status']
        else:
            new.pop('status', None)
        meta['resourceVersion'] = self._next_revision()
        stored.delete()
        stored.create(new)
        await self._record(request.resource, 'MODIFIED', stored.raw)
        return aiohttp.web.json_response(stored.raw)

    async def _update_status(self, request):
        """A PATCH merges into the status; a PUT replaces it, refused (409) when it carries a
        resourceVersion that is not the stored one."""
        obj = self._stored(request)
        if obj is None:
            return _status(404, 'NotFound', f'{request.name} not found')
        status = (request.data or {}).get('status', {})
        if request.method.value == 'PUT':
            expected = (request.data or {}).get('metadata', {}).get('resourceVersion')
            new = json.loads(json.dumps(obj.raw))
            if expected and expected != new['metadata'].get('resourceVersion'):
                return _status(409, 'Conflict', 'the object has been modified; please apply '
                               'your changes to the latest version and try again')
            new['status'] = status
            new['metadata']['resourceVersion'] = self._next_revision()
            obj.delete()
            obj.create(new)
        else:
            obj.patch({'status': status, 'metadata': {'resourceVersion': self._next_revision()}})
        await self._record(request.resource, 'MODIFIED', obj.raw)
        return aiohttp.web.json_response(obj.raw)

    async def _serve_list(self, request):
        params = request.params
        token = params.get('continue')
        if token:
            if token not in self.paged_lists:
                raise aiohttp.web.HTTPGone(
                    text=json.dumps({'kind': 'Status', 'apiVersion': 'v1', 'status': 'Failure',
                                     'reason': 'Expired', 'code': 410,
                                     'message': 'the continue token is no longer valid'}),
                    content_type='application/json')
            listed, revision, items = self.paged_lists.pop(token)
        else:
            listed = await super()._serve_list(request)
            revision = self.revision
            items = [item for item in listed['items'] if _selected(request, item)]
        limit = int(params.get('limit') or 0)
        metadata = {'resourceVersion': str(revision)}
        if limit > 0 and len(items) > limit:
            token = str(uuid.uuid4())
            self.paged_lists[token] = (listed, revision, items[limit:])
            metadata['continue'] = token
            metadata['remainingItemCount'] = len(items) - limit
            items = items[:limit]
        return {**listed, 'metadata': metadata, 'items': items}

    async def _serve_watch(self, request):
        yield b''
        params = request.params
        timeout = float(params.get('timeoutSeconds') or 1800)
        deadline = asyncio.get_running_loop().time() + timeout
        generation = self.watch_generation
        since = params.get('resourceVersion') or '0'
        if since == '0':
            listed = await self._serve_list(request)
            for item in listed['items']:
                yield {'type': 'ADDED', 'object': item}
            since = str(self.revision)
        since = int(since)
        if since + 1 < self.oldest_kept:
            yield {'type': 'ERROR', 'object': {
                'kind': 'Status', 'apiVersion': 'v1', 'status': 'Failure', 'reason': 'Expired',
                'code': 410, 'message': f'too old resource version: {since} ({self.oldest_kept - 1})'}}
            return
        position = 0
        while True:
            # Taken before the history is read, so a change made meanwhile wakes the wait below.
            changed = self.changed
            while position < len(self.history) and self.history[position][0] <= since:
                position += 1
            while position < len(self.history):
                rv, resource, event = self.history[position]
                position += 1
                since = rv
                meta = event['object'].get('metadata', {})
                if resource == request.resource and (
                        request.namespace is None or meta.get('namespace') == request.namespace) \
                        and _selected(request, event['object']):
                    yield event
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0 or generation != self.watch_generation:
                return
            try:
                await asyncio.wait_for(changed.wait(), timeout=min(remaining, 1.0))
            except asyncio.TimeoutError:
                pass
            if generation != self.watch_generation:
                return

    async def _test_hook(self, request):
        path = request.url.path
        if path in ('/_test/drop-watches', '/_test/block-watches', '/_test/unblock-watches'):
            self.watches_blocked = path == '/_test/block-watches'
            self.watch_generation += 1
            self._notify_watches()
        elif path == '/_test/compact':
            self.history = []
            self.oldest_kept = self.revision + 1
            self.watch_generation += 1
            self._notify_watches()
        elif path == '/_test/fail-bindings':
            data = request.data or {}
            self.binding_failures.extend([int(data.get('status', 500))] * int(data.get('count', 1)))
        elif path == '/_test/slow-bindings':
            data = request.data or {}
            self.binding_delays.extend([float(data.get('seconds', 5))] * int(data.get('count', 1)))
        elif path == '/_test/counts':
            return aiohttp.web.json_response(dict(self.counts))
        elif path == '/_test/binding-latencies':
            # Seconds from each pod's creation to its binding, as percentiles.
            latencies = sorted(self.bind_latencies)
            at = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] \
                if latencies else None
            return aiohttp.web.json_response({'count': len(latencies), 'p50': at(0.5),
                                              'p99': at(0.99), 'max': at(1.0)})
        elif path == '/_test/writes':
            return aiohttp.web.json_response(self.writes)
        elif path == '/_test/install':
            data = request.data or {}
            self.resources[data['resource']] = {
                'kind': data['kind'], 'namespaced': bool(data.get('namespaced')),
                'subresources': set(data.get('subresources', []))}
        else:
            return _status(404, 'NotFound', path)
        return aiohttp.web.json_response({'ok': True})


class _RecentRequests(list):
    """kmock's log of the requests it was sent, holding every watch but only the latest
    `KEPT_REQUESTS` other requests. kmock finds a request in that log through each reaction's
    filters when it routes it, and again for every event a watch streams, so with the whole log
    kept each of those cost time in proportion to every request before it (at a few thousand
    requests, tens of milliseconds). Watches stay for as long as they stream; a list or a discovery
    request is routed a few awaits after it is logged, long before `KEPT_REQUESTS` others arrive.
    The length still counts every request, as kmock numbers requests by it."""

    def __init__(self):
        super().__init__()
        self.sent = 0

    def append(self, request):
        self.sent += 1
        super().append(request)
        if list.__len__(self) > 2 * KEPT_REQUESTS:
            older = list.__getitem__(self, slice(None, -KEPT_REQUESTS))
            recent = list.__getitem__(self, slice(-KEPT_REQUESTS, None))
            self[:] = [r for r in older if r.action == enums.action.WATCH] + recent

    def __len__(self):
        return self.sent


# Requests other than watches that kmock's log keeps: far more than are ever in flight at once.
KEPT_REQUESTS = 256


def _selected(request, obj: dict) -> bool:
    """Whether `obj` passes the request's fieldSelector and labelSelector (equality terms)."""
    meta = obj.get('metadata', {})
    fields = {'metadata.name': meta.get('name'), 'metadata.namespace': meta.get('namespace')}
    labels = meta.get('labels') or {}
    for term in filter(None, request.params.get('fieldSelector', '').split(',')):
        key, _, value = term.partition('=')
        if fields.get(key) != value.lstrip('='):
            return False
    for term in filter(None, request.params.get('labelSelector', '').split(',')):
        key, _, value = term.partition('=')
        if labels.get(key) != value.lstrip('='):
            return False
    return True


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')


def _is_replace(request) -> bool:
    """A PUT to a named object (kmock serves only PATCH there)."""
    return request.method.value == 'PUT' and request.name is not None \
        and not request.subresource


def _status(code: int, reason: str, message: str):
    return aiohttp.web.json_response({'kind': 'Status', 'apiVersion': 'v1', 'status': 'Failure',
                                      'reason': reason, 'message': message, 'code': code},
                                     status=code)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--port', type=int, default=0)
    args = parser.parse_args()
    async with ApiServer() as handler, kmock.Server(handler, port=args.port) as server:
        print(f'listening on http://127.0.0.1:{server.port}', flush=True)
        await asyncio.Event().wait()


if __name__ == '__main__':
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
