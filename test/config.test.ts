import { describe, expect, it } from 'vitest'
import { unknownSettings } from '../src/config.js'

describe('variables that look like settings and are none', () => {
  it.each([
    ['DATADIR', 'DATA_DIR'],
    ['PROT', 'PORT'],
    ['port', 'PORT'],
    ['HOSTS', 'HOST'],
    ['LOGLEVEL', 'LOG_LEVEL'],
    ['LOG_LEVL', 'LOG_LEVEL'],
    ['DATABSE_URL', 'DATABASE_URL'],
    ['REDIS_URI', 'REDIS_URL'],
    ['METRIC', 'METRICS'],
    ['KEEPALIVE_TIMEOUT_MS', 'KEEP_ALIVE_TIMEOUT_MS'],
    ['RATE_LIMIT_PER_MINUTES', 'RATE_LIMIT_PER_MINUTE'],
    ['STRICT_SETTING', 'STRICT_SETTINGS']
  ])('%s is a slip of %s', (variable, setting) => {
    expect(unknownSettings({ [variable]: 'x' })).toEqual([{ variable, closest: setting }])
  })

  it('names one that only shares the first word of a setting, without a setting it is a slip of', () => {
    expect(unknownSettings({ DATABASE_PASSWORD: 'x', DATABASE_PORT: '5432', REDIS_HOST: 'cache' })).toEqual([
      { variable: 'DATABASE_PASSWORD', closest: undefined },
      { variable: 'DATABASE_PORT', closest: undefined },
      { variable: 'REDIS_HOST', closest: undefined }
    ])
  })

  it('never names the usual environment of a process, a shell, npm, CI or a Kubernetes pod', () => {
    const names = [
      'PATH', 'HOME', 'HOSTNAME', 'HOSTTYPE', 'PWD', 'OLDPWD', 'SHELL', 'SHLVL', 'USER', 'LOGNAME', 'LANG', 'LANGUAGE', 'TERM', 'TZ', 'TMPDIR', 'TMP',
      'EDITOR', 'PAGER', 'MAIL', 'DISPLAY', 'COLORTERM', 'SSH_CLIENT', 'XDG_RUNTIME_DIR', 'XDG_DATA_DIRS', 'DBUS_SESSION_BUS_ADDRESS',
      'NODE', 'NODE_ENV', 'NODE_OPTIONS', 'NODE_VERSION', 'NODE_COMPILE_CACHE', 'YARN_VERSION', 'INIT_CWD', 'COLOR', 'FORCE_COLOR', 'NO_COLOR',
      'npm_config_loglevel', 'npm_lifecycle_event', 'npm_package_name', 'npm_execpath', 'npm_node_execpath', 'npm_command',
      'CI', 'GITHUB_ACTIONS', 'GITHUB_WORKSPACE', 'RUNNER_TEMP', 'RUNNER_OS', 'HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY', 'http_proxy', 'no_proxy',
      'PGHOST', 'PGPORT', 'PGUSER', 'PGPASSWORD', 'PGDATABASE', 'JAVA_HOME', 'GOPATH', 'LD_LIBRARY_PATH',
      'KUBERNETES_SERVICE_HOST', 'KUBERNETES_SERVICE_PORT', 'KUBERNETES_SERVICE_PORT_HTTPS', 'KUBERNETES_PORT_443_TCP', 'KUBERNETES_PORT_443_TCP_ADDR'
    ]
    expect(unknownSettings(Object.fromEntries(names.map((name) => [name, 'x'])))).toEqual([])
  })

  it('never names what Kubernetes gives a pod for a service beside it, even one named like a setting', () => {
    const env = {
      REDIS_SERVICE_HOST: '10.96.0.11',
      REDIS_SERVICE_PORT: '6379',
      REDIS_SERVICE_PORT_REDIS: '6379',
      REDIS_PORT: 'tcp://10.96.0.11:6379',
      REDIS_PORT_6379_TCP: 'tcp://10.96.0.11:6379',
      REDIS_PORT_6379_TCP_PROTO: 'tcp',
      REDIS_PORT_6379_TCP_PORT: '6379',
      REDIS_PORT_6379_TCP_ADDR: '10.96.0.11',
      DATABASE_PORT: 'tcp://10.96.0.12:5432'
    }
    expect(unknownSettings(env)).toEqual([])
  })
})
