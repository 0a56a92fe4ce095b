# Written by `trainmon run` (from src/cli/sitecustomize.py, compiled into
# the binary): instruments this Python process from the inside, after
# handing over to the sitecustomize it hides (if any).
#
# Which trainmon package this interpreter loads, decided here, by the job's
# own interpreter (README, "trainmon run"):
#   1. its own (found on sys.path; the package beside the binary is not on
#      it) when that one's version is the binary's (TRAINMON_VERSION): the
#      version is read without running it, from its pip metadata beside it,
#      else a literal __version__ in its __init__.py;
#   2. else the package beside the binary (TRAINMON_PKG_DIR) when it holds
#      an extension built for this interpreter (importlib's
#      EXTENSION_SUFFIXES), loaded as `trainmon` for this import only:
#      sys.path is left alone, and the job's own `import trainmon` gets this
#      same module;
#   3. else none: one line on stderr (once per job: children inherit
#      TRAINMON_AGENT_SAID) naming this interpreter and the command that
#      fixes it, and TRAINMON_RUN_DIR/agent-<pid>.json saying why, which
#      `trainmon report` turns into the run.agent_not_loaded finding.  The
#      file is written with plain Python: the extension is what failed.
# The job runs unchanged in every case: nothing here raises into it.


def _trainmon_boot():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import importlib.machinery
        import importlib.util

        rest = [p for p in sys.path if os.path.abspath(p or '.') != here]
        spec = importlib.machinery.PathFinder.find_spec('sitecustomize', rest)
        if spec is not None and spec.loader is not None:
            mod = importlib.util.module_from_spec(spec)
            sys.modules['sitecustomize'] = mod
            spec.loader.exec_module(mod)
    except Exception as e:
        sys.stderr.write('trainmon: the sitecustomize after trainmon\'s failed '
                         '(%s: %s)\n' % (type(e).__name__, e))
    if os.environ.get('TRAINMON_ATTACH') != '1' or 'trainmon' in sys.modules:
        return
    why, fix = _trainmon_load(os, sys)
    if why is None:
        return
    exe = sys.executable or 'python'
    pyver = '%d.%d.%d' % sys.version_info[:3]
    if os.environ.get('TRAINMON_AGENT_SAID') != '1':
        os.environ['TRAINMON_AGENT_SAID'] = '1'
        sys.stderr.write('trainmon: steps not recorded in %s (Python %s): %s; to fix: %s\n'
                         % (exe, pyver, why, fix))
    _trainmon_note(os, {'pid': os.getpid(), 'python': exe, 'version': pyver,
                        'loaded': False, 'reason': why, 'fix': fix})


def _trainmon_version(os, spec):
    """The version of the package spec names, without running it: its pip
    metadata beside it (NAME-VERSION.dist-info), else a literal
    __version__ = '...' in its __init__.py; None when neither says."""
    import re
    entry = os.path.dirname(spec.origin)
    if spec.submodule_search_locations is not None:  # a package, not trainmon.py
        entry = os.path.dirname(entry)
    try:
        found = [n[len('trainmon-'):-len('.dist-info')] for n in os.listdir(entry)
                 if n.startswith('trainmon-') and n.endswith('.dist-info')]
        if len(found) == 1:
            return found[0]
    except OSError:
        pass
    try:
        with open(spec.origin, 'rb') as f:
            head = f.read(1 << 16)
        m = re.search(rb'^__version__\s*=\s*[\'"]([^\'"\r\n]{1,40})[\'"]', head, re.M)
        if m:
            return m.group(1).decode('ascii', 'replace')
    except OSError:
        pass
    return None


def _trainmon_load(os, sys):
    """Loads trainmon by the rule above.  (None, None) when loaded, else
    (why, the command that fixes it)."""
    import importlib.machinery
    import importlib.util

    want = os.environ.get('TRAINMON_VERSION', '')
    bundled = os.environ.get('TRAINMON_PKG_DIR', '')
    why = []
    own = None
    try:
        own = importlib.util.find_spec('trainmon')
    except Exception:
        pass
    if own is not None and own.origin and bundled and \
            os.path.realpath(os.path.dirname(own.origin)) == \
            os.path.realpath(os.path.join(bundled, 'trainmon')):
        own = None  # the bundled one itself, on the job's own path: rule 2
    if own is not None and own.origin:
        where = os.path.dirname(own.origin)
        have = _trainmon_version(os, own)
        if have is not None and have == want:
            try:
                import trainmon  # noqa: F401  (attaches when torch is imported)
                return None, None
            except Exception as e:
                why.append('its own trainmon (%s) failed to import (%s: %s)'
                           % (where, type(e).__name__, e))
        else:
            why.append('its own trainmon (%s) is version %s, not %s'
                       % (where, have or 'unknown', want or 'unknown'))
    if bundled:
        pkg = os.path.join(bundled, 'trainmon')
        built = any(os.path.isfile(os.path.join(pkg, '_trainmon' + s))
                    for s in importlib.machinery.EXTENSION_SUFFIXES)
        if built:
            try:
                spec = importlib.machinery.PathFinder.find_spec('trainmon', [bundled])
                mod = importlib.util.module_from_spec(spec)
                sys.modules['trainmon'] = mod
                try:
                    spec.loader.exec_module(mod)
                except BaseException:
                    sys.modules.pop('trainmon', None)
                    raise
                return None, None
            except Exception as e:
                why.append('%s failed to import (%s: %s)' % (pkg, type(e).__name__, e))
        else:
            why.append('%s has no extension built for it (_trainmon%s)'
                       % (pkg, importlib.machinery.EXTENSION_SUFFIXES[0]))
    else:
        why.append('no trainmon package beside the trainmon binary')
    if own is None:
        why.insert(0, 'no trainmon installed for it')
    return '; '.join(why), _trainmon_fix(os, sys, bundled, want)


def _trainmon_fix(os, sys, bundled, want):
    """The command that gives this interpreter its own trainmon of the
    binary's version: pip install of the source tree the package beside the
    binary came from (the build tree), or of the source archive `make
    install` put beside it."""
    exe = sys.executable or 'python3'
    if bundled:
        src = os.path.dirname(os.path.realpath(bundled))
        if os.path.isfile(os.path.join(src, 'setup.py')):
            return '%s -m pip install %s' % (exe, src)
        sdist = os.path.join(src, 'trainmon-%s.tar.gz' % want)
        if os.path.isfile(sdist):
            return '%s -m pip install %s' % (exe, sdist)
    return '%s -m pip install <trainmon %s source tree>' % (exe, want or '')


def _trainmon_note(os, note):
    """TRAINMON_RUN_DIR/agent-<pid>.json: new (O_EXCL, no symlink
    followed), readable as the run directory's files are (0600, 0640 in a
    group-readable one)."""
    d = os.environ.get('TRAINMON_RUN_DIR')
    if not d:
        return
    try:
        import json
        mode = 0o640 if os.stat(d).st_mode & 0o050 == 0o050 else 0o600
        path = os.path.join(d, 'agent-%d.json' % note['pid'])
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | getattr(os, 'O_CLOEXEC', 0), mode)
        try:
            os.write(fd, (json.dumps(note) + '\n').encode('ascii'))
        finally:
            os.close(fd)
    except Exception:
        pass


try:
    _trainmon_boot()
except BaseException:
    pass
del _trainmon_boot, _trainmon_version, _trainmon_load, _trainmon_fix, _trainmon_note
