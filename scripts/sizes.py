#!/usr/bin/env python3
"""The size limits of the product's code: no function over 60 lines, no file over 600 lines
(the flag table, master/flags/flags.cc, excepted: one row per flag). Run by ctest
(code.sizes); prints each one over its limit and exits 1, or prints the largest and exits 0.

  scripts/sizes.py [SOURCE_DIR]

A brace scanner, not a parser: comments, strings, character literals and preprocessor lines
are blanked, then a brace opened at namespace or class scope whose header has a parenthesis
(and is not a class, struct, union, enum or an initializer) opens a function, counted from the
first line of its header to its closing brace.
"""
import os
import re
import subprocess
import sys

FUNCTION_LINES = 60
FILE_LINES = 600
FILE_EXCEPTIONS = {"master/flags/flags.cc"}
PRODUCT = re.compile(r"^(master|worker|shm|core|data|nn|include|monitoring)/.*\.(cc|h)$")


def strip(src):
    out=[];i=0;n=len(src)
    while i<n:
        c=src[i]
        if src.startswith('//',i):
            j=src.find('\n',i); j=n if j<0 else j; out.append(' '*(j-i)); i=j
        elif src.startswith('/*',i):
            j=src.find('*/',i+2); j=n if j<0 else j+2; out.append(''.join(ch if ch=='\n' else ' ' for ch in src[i:j])); i=j
        elif c=='R' and src.startswith('R"',i):
            m=re.match(r'R"([^(]*)\(',src[i:]); end=')'+m.group(1)+'"'; j=src.find(end,i)+len(end)
            out.append(''.join(ch if ch=='\n' else ' ' for ch in src[i:j])); i=j
        elif c=="'" and i>0 and src[i-1].isalnum() and i+1<n and src[i+1].isalnum():
            out.append(' '); i+=1
        elif c in '"\'':
            j=i+1
            while j<n and src[j]!=c:
                j+= 2 if src[j]=='\\' else 1
            out.append(c+' '*(j-i-1)+c); i=j+1
        else: out.append(c); i+=1
    return ''.join(out)
def functions(path):
    s=strip(open(path).read())
    s=re.sub(r'(?m)^[ \t]*#.*$', lambda m: ' '*len(m.group(0)), s)
    stack=[]; header_start=0; res=[]
    i=0; line=1; last_stmt=0
    for i,c in enumerate(s):
        if c=='{':
            hdr=s[last_stmt:i]
            kind='other'
            top = all(k in ('ns','class') for k,_,_ in stack)
            h=hdr.strip()
            if top:
                if re.match(r'^(namespace|extern\s+"C")',h) or h.startswith('namespace'): kind='ns'
                elif re.search(r'\b(class|struct|union|enum)\b[^()]*$',re.sub(r'alignas\([^)]*\)','',h)): kind='class'
                elif '(' in h and not h.endswith('=') and not re.search(r'=\s*$',h): kind='fn'
            name=re.sub(r'\s+',' ',h)[-80:]
            stack.append((kind, s.count('\n',0,last_stmt+len(hdr)-len(hdr.lstrip()))+1, name))
            last_stmt=i+1
        elif c=='}':
            if stack:
                k,start,name=stack.pop()
                if k=='fn':
                    end=s.count('\n',0,i)+1
                    res.append((end-start+1,path,start,name))
            last_stmt=i+1
        elif c==';':
            last_stmt=i+1
    return res


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    listed = subprocess.check_output(["git", "ls-files"], cwd=root).decode().split()
    files = [f for f in listed if PRODUCT.match(f)]
    over, longest = [], (0, "", 0, "")
    for f in files:
        path = os.path.join(root, f)
        for lines, _, start, name in functions(path):
            longest = max(longest, (lines, f, start, name))
            if lines > FUNCTION_LINES:
                over.append("%s:%d: a function of %d lines (limit %d): %s" % (f, start, lines, FUNCTION_LINES, name[-60:]))
        with open(path) as fh:
            n = sum(1 for _ in fh)
        if n > FILE_LINES and f not in FILE_EXCEPTIONS:
            over.append("%s: %d lines (limit %d)" % (f, n, FILE_LINES))
    if over:
        print("\n".join(over))
        return 1
    print("%d files; the longest function: %s:%d, %d lines" % (len(files), longest[1], longest[2], longest[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
