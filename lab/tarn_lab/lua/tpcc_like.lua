-- tarn-lab TPC-C-like workload for sysbench 1.0 (LuaJIT), written from the public TPC-C
-- specification (revision 5.11): its nine tables and five transactions with the spec's
-- mix (New-Order 45%, Payment 43%, Order-Status 4%, Delivery 4%, Stock-Level 4%).
-- It is NOT an audited or complete TPC-C: no keying/think times, simplified columns,
-- uniform instead of NURand in places, one sysbench event = one transaction of any kind.
-- Reports must call it "TPC-C-like". Scale: --scale warehouses, --items (spec 100000),
-- --customers per district (spec 3000). Usage: sysbench tpcc_like.lua [opts] prepare|run

sysbench.cmdline.options = {
   scale = {"Number of warehouses", 1},
   items = {"Rows in item (and stock rows per warehouse)", 100000},
   customers = {"Customers (and initial orders) per district", 3000},
   districts = {"Districts per warehouse", 10},
}

local DIST = 10

local function opt(name) return tonumber(sysbench.opt[name]) end

local function rstr(lo, hi)
   return sysbench.rand.string(string.rep("@", sysbench.rand.uniform(lo, hi)))
end

local function nstr(n)
   return sysbench.rand.string(string.rep("#", n))
end

-- TPC-C 4.3.2.3: customer last names from three syllables of a number 0..999.
local SYL = {"BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING"}
local function last_name(n)
   return SYL[math.floor(n / 100) % 10 + 1] .. SYL[math.floor(n / 10) % 10 + 1] .. SYL[n % 10 + 1]
end

-- TPC-C 2.1.6 NURand(A, x, y) with a fixed C.
local function nurand(a, x, y)
   local c = 123 % (a + 1)
   return (bit.bor(sysbench.rand.uniform(0, a), sysbench.rand.uniform(x, y)) + c) % (y - x + 1) + x
end

local DDL = {
[[CREATE TABLE warehouse (w_id INT NOT NULL, w_name VARCHAR(10), w_street_1 VARCHAR(20),
  w_city VARCHAR(20), w_state CHAR(2), w_zip CHAR(9), w_tax DECIMAL(4,4), w_ytd DECIMAL(12,2),
  PRIMARY KEY (w_id)) ENGINE=InnoDB]],
[[CREATE TABLE district (d_id INT NOT NULL, d_w_id INT NOT NULL, d_name VARCHAR(10),
  d_street_1 VARCHAR(20), d_city VARCHAR(20), d_state CHAR(2), d_zip CHAR(9), d_tax DECIMAL(4,4),
  d_ytd DECIMAL(12,2), d_next_o_id INT, PRIMARY KEY (d_w_id, d_id)) ENGINE=InnoDB]],
[[CREATE TABLE customer (c_id INT NOT NULL, c_d_id INT NOT NULL, c_w_id INT NOT NULL,
  c_first VARCHAR(16), c_middle CHAR(2), c_last VARCHAR(16), c_street_1 VARCHAR(20),
  c_city VARCHAR(20), c_state CHAR(2), c_zip CHAR(9), c_phone CHAR(16), c_since DATETIME,
  c_credit CHAR(2), c_credit_lim DECIMAL(12,2), c_discount DECIMAL(4,4), c_balance DECIMAL(12,2),
  c_ytd_payment DECIMAL(12,2), c_payment_cnt INT, c_delivery_cnt INT, c_data VARCHAR(500),
  PRIMARY KEY (c_w_id, c_d_id, c_id), KEY idx_customer (c_w_id, c_d_id, c_last, c_first)) ENGINE=InnoDB]],
[[CREATE TABLE history (h_id BIGINT NOT NULL AUTO_INCREMENT, h_c_id INT, h_c_d_id INT, h_c_w_id INT,
  h_d_id INT, h_w_id INT, h_date DATETIME, h_amount DECIMAL(6,2), h_data VARCHAR(24),
  PRIMARY KEY (h_id)) ENGINE=InnoDB]],
[[CREATE TABLE orders (o_id INT NOT NULL, o_d_id INT NOT NULL, o_w_id INT NOT NULL, o_c_id INT,
  o_entry_d DATETIME, o_carrier_id INT, o_ol_cnt INT, o_all_local INT,
  PRIMARY KEY (o_w_id, o_d_id, o_id), KEY idx_orders (o_w_id, o_d_id, o_c_id, o_id)) ENGINE=InnoDB]],
[[CREATE TABLE new_orders (no_o_id INT NOT NULL, no_d_id INT NOT NULL, no_w_id INT NOT NULL,
  PRIMARY KEY (no_w_id, no_d_id, no_o_id)) ENGINE=InnoDB]],
[[CREATE TABLE order_line (ol_o_id INT NOT NULL, ol_d_id INT NOT NULL, ol_w_id INT NOT NULL,
  ol_number INT NOT NULL, ol_i_id INT, ol_supply_w_id INT, ol_delivery_d DATETIME, ol_quantity INT,
  ol_amount DECIMAL(6,2), ol_dist_info CHAR(24),
  PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number)) ENGINE=InnoDB]],
[[CREATE TABLE item (i_id INT NOT NULL, i_im_id INT, i_name VARCHAR(24), i_price DECIMAL(5,2),
  i_data VARCHAR(50), PRIMARY KEY (i_id)) ENGINE=InnoDB]],
[[CREATE TABLE stock (s_i_id INT NOT NULL, s_w_id INT NOT NULL, s_quantity INT, s_dist CHAR(24),
  s_ytd INT, s_order_cnt INT, s_remote_cnt INT, s_data VARCHAR(50),
  PRIMARY KEY (s_w_id, s_i_id)) ENGINE=InnoDB]],
}

local function bulk(con, head, n, row)
   con:bulk_insert_init(head)
   for i = 1, n do con:bulk_insert_next(row(i)) end
   con:bulk_insert_done()
end

function cmd_prepare()
   local drv = sysbench.sql.driver()
   local con = drv:connect()
   for _, ddl in ipairs(DDL) do con:query(ddl) end
   local items, custs, wh = opt("items"), opt("customers"), opt("scale")
   print(string.format("TPC-C-like prepare: %d warehouse(s), %d items, %d customers/district", wh, items, custs))
   bulk(con, "INSERT INTO item VALUES", items, function(i)
      return string.format("(%d,%d,'%s',%.2f,'%s')", i, sysbench.rand.uniform(1, 10000), rstr(14, 24),
                           sysbench.rand.uniform(100, 10000) / 100, rstr(26, 50)) end)
   for w = 1, wh do
      con:query(string.format("INSERT INTO warehouse VALUES (%d,'%s','%s','%s','%s','%s',%.4f,300000)",
         w, rstr(6, 10), rstr(10, 20), rstr(10, 20), rstr(2, 2), nstr(4) .. "11111", sysbench.rand.uniform(0, 2000) / 10000))
      bulk(con, "INSERT INTO stock VALUES", items, function(i)
         return string.format("(%d,%d,%d,'%s',0,0,0,'%s')", i, w, sysbench.rand.uniform(10, 100), rstr(24, 24), rstr(26, 50)) end)
      for d = 1, DIST do
         con:query(string.format("INSERT INTO district VALUES (%d,%d,'%s','%s','%s','%s','%s',%.4f,30000,%d)",
            d, w, rstr(6, 10), rstr(10, 20), rstr(10, 20), rstr(2, 2), nstr(4) .. "11111",
            sysbench.rand.uniform(0, 2000) / 10000, custs + 1))
         bulk(con, "INSERT INTO customer VALUES", custs, function(c)
            local last = c <= 1000 and last_name(c - 1) or last_name(nurand(255, 0, 999))
            return string.format("(%d,%d,%d,'%s','OE','%s','%s','%s','%s','%s','%s',NOW(),'%s',50000,%.4f,-10,10,1,0,'%s')",
               c, d, w, rstr(8, 16), last, rstr(10, 20), rstr(10, 20), rstr(2, 2), nstr(4) .. "11111", nstr(16),
               sysbench.rand.uniform(1, 10) == 1 and "BC" or "GC", sysbench.rand.uniform(0, 5000) / 10000, rstr(300, 500)) end)
         bulk(con, "INSERT INTO history (h_c_id,h_c_d_id,h_c_w_id,h_d_id,h_w_id,h_date,h_amount,h_data) VALUES", custs,
            function(c) return string.format("(%d,%d,%d,%d,%d,NOW(),10,'%s')", c, d, w, d, w, rstr(12, 24)) end)
         -- Initial orders: one per customer in a random permutation; the last 30% undelivered.
         local perm = {}
         for i = 1, custs do perm[i] = i end
         for i = custs, 2, -1 do local j = sysbench.rand.uniform(1, i); perm[i], perm[j] = perm[j], perm[i] end
         local undelivered = custs - math.floor(custs * 0.3)
         local counts = {}
         bulk(con, "INSERT INTO orders VALUES", custs, function(o)
            counts[o] = sysbench.rand.uniform(5, 15)
            return string.format("(%d,%d,%d,%d,NOW(),%s,%d,1)", o, d, w, perm[o],
               o <= undelivered and tostring(sysbench.rand.uniform(1, 10)) or "NULL", counts[o]) end)
         con:bulk_insert_init("INSERT INTO order_line VALUES")
         for o = 1, custs do
            for l = 1, counts[o] do
               con:bulk_insert_next(string.format("(%d,%d,%d,%d,%d,%d,%s,5,%.2f,'%s')", o, d, w, l,
                  sysbench.rand.uniform(1, items), w, o <= undelivered and "NOW()" or "NULL",
                  o <= undelivered and 0 or sysbench.rand.uniform(1, 999999) / 100, rstr(24, 24)))
            end
         end
         con:bulk_insert_done()
         bulk(con, "INSERT INTO new_orders VALUES", custs - undelivered, function(i)
            return string.format("(%d,%d,%d)", undelivered + i, d, w) end)
      end
   end
   con:disconnect()
end

function cmd_cleanup()
   local con = sysbench.sql.driver():connect()
   for _, t in ipairs({"warehouse", "district", "customer", "history", "orders", "new_orders",
                       "order_line", "item", "stock"}) do
      con:query("DROP TABLE IF EXISTS " .. t)
   end
end

sysbench.cmdline.commands = {
   prepare = {cmd_prepare},
   cleanup = {cmd_cleanup},
}

function thread_init()
   drv = sysbench.sql.driver()
   con = drv:connect()
   con:query("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
end

function thread_done()
   con:disconnect()
end

-- A deadlock or lock-wait timeout restarts the event: roll back what was left open.
function sysbench.hooks.before_restart_event(err)
   con:query("ROLLBACK")
end

local function q(fmt, ...) return con:query(string.format(fmt, ...)) end
local function row(fmt, ...) return con:query_row(string.format(fmt, ...)) end

local function pick_customer(w, d)
   -- 60% by last name, 40% by id (TPC-C 2.5.1.2 / 2.6.1.2).
   if sysbench.rand.uniform(1, 100) <= 60 then
      local last = last_name(nurand(255, 0, 999))
      local rs = q("SELECT c_id FROM customer WHERE c_w_id=%d AND c_d_id=%d AND c_last='%s' ORDER BY c_first", w, d, last)
      local n = rs and rs.nrows or 0
      if n > 0 then
         local c
         for i = 1, math.ceil(n / 2) do c = rs:fetch_row()[1] end
         return tonumber(c)
      end
   end
   return nurand(1023, 1, opt("customers"))
end

local function new_order(w)
   local d, c = sysbench.rand.uniform(1, DIST), nurand(1023, 1, opt("customers"))
   local n = sysbench.rand.uniform(5, 15)
   con:query("BEGIN")
   row("SELECT w_tax FROM warehouse WHERE w_id=%d", w)
   local o = tonumber(row("SELECT d_next_o_id FROM district WHERE d_w_id=%d AND d_id=%d FOR UPDATE", w, d))
   q("UPDATE district SET d_next_o_id=d_next_o_id+1 WHERE d_w_id=%d AND d_id=%d", w, d)
   row("SELECT c_discount, c_last, c_credit FROM customer WHERE c_w_id=%d AND c_d_id=%d AND c_id=%d", w, d, c)
   q("INSERT INTO orders VALUES (%d,%d,%d,%d,NOW(),NULL,%d,1)", o, d, w, c, n)
   q("INSERT INTO new_orders VALUES (%d,%d,%d)", o, d, w)
   for l = 1, n do
      local i = nurand(8191, 1, opt("items"))
      local price = row("SELECT i_price FROM item WHERE i_id=%d", i)
      local supply = w
      if opt("scale") > 1 and sysbench.rand.uniform(1, 100) == 1 then supply = sysbench.rand.uniform(1, opt("scale")) end
      local qty = tonumber(row("SELECT s_quantity FROM stock WHERE s_w_id=%d AND s_i_id=%d FOR UPDATE", supply, i)) or 50
      local ol_q = sysbench.rand.uniform(1, 10)
      qty = qty - ol_q >= 10 and qty - ol_q or qty - ol_q + 91
      q("UPDATE stock SET s_quantity=%d, s_ytd=s_ytd+%d, s_order_cnt=s_order_cnt+1 WHERE s_w_id=%d AND s_i_id=%d",
        qty, ol_q, supply, i)
      q("INSERT INTO order_line VALUES (%d,%d,%d,%d,%d,%d,NULL,%d,%.2f,'%s')", o, d, w, l, i, supply, ol_q,
        ol_q * (tonumber(price) or 1), rstr(24, 24))
   end
   con:query("COMMIT")
end

local function payment(w)
   local d = sysbench.rand.uniform(1, DIST)
   local amount = sysbench.rand.uniform(100, 500000) / 100
   con:query("BEGIN")
   q("UPDATE warehouse SET w_ytd=w_ytd+%.2f WHERE w_id=%d", amount, w)
   row("SELECT w_name FROM warehouse WHERE w_id=%d", w)
   q("UPDATE district SET d_ytd=d_ytd+%.2f WHERE d_w_id=%d AND d_id=%d", amount, w, d)
   row("SELECT d_name FROM district WHERE d_w_id=%d AND d_id=%d", w, d)
   local c = pick_customer(w, d)
   local credit = row("SELECT c_credit FROM customer WHERE c_w_id=%d AND c_d_id=%d AND c_id=%d FOR UPDATE", w, d, c)
   q("UPDATE customer SET c_balance=c_balance-%.2f, c_ytd_payment=c_ytd_payment+%.2f, c_payment_cnt=c_payment_cnt+1%s "
     .. "WHERE c_w_id=%d AND c_d_id=%d AND c_id=%d", amount, amount,
     credit == "BC" and string.format(", c_data=LEFT(CONCAT('%d %d %.2f ', c_data), 500)", c, d, amount) or "", w, d, c)
   q("INSERT INTO history (h_c_id,h_c_d_id,h_c_w_id,h_d_id,h_w_id,h_date,h_amount,h_data) VALUES (%d,%d,%d,%d,%d,NOW(),%.2f,'%s')",
     c, d, w, d, w, amount, rstr(12, 24))
   con:query("COMMIT")
end

local function order_status(w)
   local d = sysbench.rand.uniform(1, DIST)
   con:query("BEGIN")
   local c = pick_customer(w, d)
   row("SELECT c_balance, c_first, c_last FROM customer WHERE c_w_id=%d AND c_d_id=%d AND c_id=%d", w, d, c)
   local o = row("SELECT MAX(o_id) FROM orders WHERE o_w_id=%d AND o_d_id=%d AND o_c_id=%d", w, d, c)
   if o then
      q("SELECT ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_delivery_d FROM order_line "
        .. "WHERE ol_w_id=%d AND ol_d_id=%d AND ol_o_id=%d", w, d, tonumber(o))
   end
   con:query("COMMIT")
end

local function delivery(w)
   local carrier = sysbench.rand.uniform(1, 10)
   con:query("BEGIN")
   for d = 1, DIST do
      local o = row("SELECT MIN(no_o_id) FROM new_orders WHERE no_w_id=%d AND no_d_id=%d", w, d)
      if o then
         o = tonumber(o)
         q("DELETE FROM new_orders WHERE no_w_id=%d AND no_d_id=%d AND no_o_id=%d", w, d, o)
         local c = row("SELECT o_c_id FROM orders WHERE o_w_id=%d AND o_d_id=%d AND o_id=%d", w, d, o)
         q("UPDATE orders SET o_carrier_id=%d WHERE o_w_id=%d AND o_d_id=%d AND o_id=%d", carrier, w, d, o)
         q("UPDATE order_line SET ol_delivery_d=NOW() WHERE ol_w_id=%d AND ol_d_id=%d AND ol_o_id=%d", w, d, o)
         local total = row("SELECT SUM(ol_amount) FROM order_line WHERE ol_w_id=%d AND ol_d_id=%d AND ol_o_id=%d", w, d, o)
         if c then
            q("UPDATE customer SET c_balance=c_balance+%s, c_delivery_cnt=c_delivery_cnt+1 "
              .. "WHERE c_w_id=%d AND c_d_id=%d AND c_id=%d", total or "0", w, d, tonumber(c))
         end
      end
   end
   con:query("COMMIT")
end

local function stock_level(w)
   local d = sysbench.rand.uniform(1, DIST)
   local threshold = sysbench.rand.uniform(10, 20)
   con:query("BEGIN")
   local next_o = tonumber(row("SELECT d_next_o_id FROM district WHERE d_w_id=%d AND d_id=%d", w, d))
   row("SELECT COUNT(DISTINCT s_i_id) FROM order_line JOIN stock ON s_w_id=ol_w_id AND s_i_id=ol_i_id "
       .. "WHERE ol_w_id=%d AND ol_d_id=%d AND ol_o_id>=%d AND ol_o_id<%d AND s_quantity<%d",
       w, d, next_o - 20, next_o, threshold)
   con:query("COMMIT")
end

function event()
   local w = sysbench.rand.uniform(1, opt("scale"))
   local r = sysbench.rand.uniform(1, 100)
   if r <= 45 then new_order(w)
   elseif r <= 88 then payment(w)
   elseif r <= 92 then order_status(w)
   elseif r <= 96 then delivery(w)
   else stock_level(w) end
end
